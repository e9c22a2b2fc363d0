import { messages } from '@sb/contracts';
import { messageHandler, unixSeconds } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { statesAllowing } from '../domain/payments.js';

/**
 * Cancel, plan archive, pending expiry: every pending payment of the subscription stops being payable
 * (or only `payment_id`: a replaced renewal invoice, or a checkout's invoice `replaced_by` a late payment).
 * Each is closed at its provider too where the rail can (otherwise the payer could still pay it there);
 * a provider that fails is logged and does not fail the call, since our rows are already expired.
 */
/** Billing recorded the paid payment as not applied to any subscription; the owner sees why on the payment. */
export const markUnappliedHandler = (d: Deps) =>
  messageHandler(messages.markUnapplied, async (req) => ({ marked: await d.payments.markUnapplied(d.db, req.wallet_id, req.payment_id, req.reason) }));

/** Billing applied the paid payment to a subscription: the public status says so. */
export const markAppliedHandler = (d: Deps) =>
  messageHandler(messages.markApplied, async (req) => ({
    marked: await d.payments.markApplied(
      d.db,
      req.wallet_id,
      req.payment_id,
      unixSeconds(d.clock),
      req.period_start !== undefined && req.period_end !== undefined ? { start: req.period_start, end: req.period_end } : undefined,
    ),
  }));

export const expireOpenPaymentsHandler = (d: Deps) =>
  messageHandler(messages.expireOpenPayments, async (req) => {
    const { from, to } = statesAllowing('expire');
    const expired = await d.payments.transitionForSubscription(d.db, req.wallet_id, req.subscription_id, from, to, req.payment_id, req.replaced_by);
    // One that ran out before (its invoice's hour) still names the payment that started its subscription.
    if (req.replaced_by && req.payment_id) await d.payments.markReplaced(d.db, req.wallet_id, req.subscription_id, req.payment_id, req.replaced_by);
    await Promise.all(
      expired.map(async (p) => {
        const rail = d.rails[p.payment_method];
        if (rail?.provider !== p.provider || !rail.cancel) return;
        if (!p.provider_ref) return;
        try {
          await rail.cancel!(p);
        } catch (err) {
          d.log.warn({ err, payment_id: p.id, provider: p.provider }, 'could not close the expired payment at its provider');
        }
      }),
    );
    return { expired: expired.length };
  });
