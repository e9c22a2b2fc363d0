import { messages } from '@sb/contracts';
import { messageHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { statesAllowing } from '../domain/payments.js';

/** Cancel, plan archive, pending expiry: every pending payment of the subscription stops being payable. */
export const expireOpenPaymentsHandler = (d: Deps) =>
  messageHandler(messages.expireOpenPayments, async (req) => {
    const { from, to } = statesAllowing('expire');
    return { expired: await d.payments.transitionForSubscription(d.db, req.wallet_id, req.subscription_id, from, to) };
  });
