import type { Deps } from '../deps.js';
import { toPayment } from '../domain/payments.js';
import { routeHandler, walletOf } from '@sb/runtime';

export const listPayments = (d: Deps) =>
  routeHandler('payments.list', async (req) => {
    const { limit, offset, subscription_id, status, payment_method } = req.query;
    const page = await d.payments.list(d.db, walletOf(req), { subscription_id, status, payment_method }, limit, offset);
    return { ...page, items: page.items.map(toPayment) };
  });
