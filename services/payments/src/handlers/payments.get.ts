import { notFound, routeHandler, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { toPayment } from '../domain/payments.js';

export const getPayment = (d: Deps) =>
  routeHandler('payments.get', async (req) => {
    const p = await d.payments.get(d.db, walletOf(req), req.params.id);
    if (!p) throw notFound('Payment');
    return toPayment(p);
  });
