import { messages } from '@sb/contracts';
import { messageHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { answerBy, chargeConnection } from '../charge.js';
import { notPaidFields } from '../domain/charge.js';

/** Billing's scheduler: pay a renewal with the subscription's active wallet, if it still has one. */
export const charge = (d: Deps) =>
  messageHandler(messages.nwcCharge, async (req) => {
    const by = answerBy(d, messages.nwcCharge.timeoutMs, req.answer_by);
    const conn = await d.connections.activeForSubscription(d.db, req.wallet_id, req.subscription_id);
    if (!conn) return { paid: false as const, no_connection: true as const };
    const outcome = await chargeConnection(
      d,
      conn,
      {
        id: req.payment_id,
        payment_request: req.payment_request,
        amount_sats: req.amount_sats,
        // Billing's scheduler and resume charge renewal payments only.
        purpose: 'renewal',
      },
      by,
    );
    return outcome.paid
      ? { paid: true as const, confirmed: outcome.confirmed }
      : { paid: false as const, ...notPaidFields(outcome), deactivated: outcome.deactivated };
  });
