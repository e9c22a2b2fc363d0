import { conflict, notFound, routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { confirmPayment } from '../confirm.js';

/**
 * DEV MODE ONLY (registered only when DEV_MODE is on): pays a dev Lightning invoice by its payment hash
 * and answers its preimage, as a paying wallet learns it. This is how a test NWC wallet pays: through the
 * same confirmation path as the real providers. Paying twice answers the same preimage and changes nothing.
 */
export const devPayInvoice = (d: Deps) =>
  routeHandler('dev.invoices.pay', async (req) => {
    const inv = await d.payments.devInvoice(d.db, req.params.payment_hash);
    if (!inv) throw notFound('Invoice');
    const { payment, confirmed } = await confirmPayment(d, inv.id);
    if (confirmed) d.log.info({ payment_id: inv.id }, 'dev provider: invoice paid');
    if (payment?.status !== 'paid') throw conflict(`Payment is ${payment?.status} and can no longer be paid`);
    return { payment_id: inv.id, preimage: inv.dev_preimage };
  });
