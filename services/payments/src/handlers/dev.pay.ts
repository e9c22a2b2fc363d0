import { conflict, notFound, routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { confirmPayment } from '../confirm.js';
import { toPayment } from '../domain/payments.js';

/**
 * DEV MODE ONLY (registered only when DEV_MODE is on): pays a payment of the dev Lightning provider, as
 * a subscriber's wallet would, through the same confirmation path the real providers use. Paying twice
 * answers the paid payment and changes nothing.
 */
export const devPay = (d: Deps) =>
  routeHandler('dev.payments.pay', async (req) => {
    const p = await d.payments.getById(d.db, req.params.id);
    if (!p) throw notFound('Payment');
    if (p.provider !== 'dev') throw conflict('Only payments of the dev Lightning provider can be paid here');
    const { payment, confirmed } = await confirmPayment(d, p.id);
    if (confirmed) d.log.info({ payment_id: p.id }, 'dev provider: payment paid');
    const now = payment ?? p;
    if (now.status !== 'paid') throw conflict(`Payment is ${now.status} and can no longer be paid`);
    return toPayment(now);
  });
