import { messages } from '@sb/contracts';
import { messageHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { toPayment } from '../domain/payments.js';

/** A subscription's payment history, newest first (billing answers `GET /subscriptions/{id}/payments` with it). */
export const listSubscriptionPaymentsHandler = (d: Deps) =>
  messageHandler(messages.listSubscriptionPayments, async (req) => {
    const page = await d.payments.list(d.db, req.wallet_id, { subscription_id: req.subscription_id }, req.limit, req.offset);
    return { ...page, items: page.items.map(toPayment) };
  });
