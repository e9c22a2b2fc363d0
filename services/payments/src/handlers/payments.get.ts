import { messages } from '@sb/contracts';
import { messageHandler, notFound, routeHandler, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { toPayment } from '../domain/payments.js';

export const getPayment = (d: Deps) =>
  routeHandler('payments.get', async (req) => {
    const p = await d.payments.get(d.db, walletOf(req), req.params.id);
    if (!p) throw notFound('Payment');
    return toPayment(p);
  });

/** Another service's lookup of one payment: null when the wallet has no such payment. */
export const getPaymentInternal = (d: Deps) =>
  messageHandler(messages.getPayment, async (req) => {
    const p = await d.payments.get(d.db, req.wallet_id, req.id);
    return { payment: p ? toPayment(p) : null };
  });
