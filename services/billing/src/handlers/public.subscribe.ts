import { messages, utcMinute } from '@sb/contracts';
import { DomainError, messageHandler, routeHandler, invalid } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { openSubscription, pendingCheckout, type Opened } from '../subscribe.js';

/** A 409 (the contact already subscribes) is a retry when their checkout of the plan is still unpaid. */
const retryPending =
  (d: Deps, input: Parameters<typeof pendingCheckout>[1]) =>
  async (err: unknown): Promise<Opened> => {
    const retry = err instanceof DomainError && err.kind === 'conflict' ? await pendingCheckout(d, input) : undefined;
    if (!retry) throw err;
    return retry;
  };

/** Public checkout: an invoice, address or processor checkout for paid plans; an active trial otherwise. */
export const subscribe = (d: Deps) =>
  routeHandler('public.subscribe', async (req) => {
    const body = req.body;
    // An NWC subscription needs the wallet's connection string, which only the NWC service takes.
    if (body.payment_method === 'nwc') {
      throw invalid(['payment_method'], 'NWC subscriptions are made with POST /public/subscribe/nwc', 'value_error');
    }
    const { plan, sub, manage_url, created } = await openSubscription(d, { ...body, checkout_key: req.caller.idempotency_key }).catch(retryPending(d, body));
    if (!created) {
      const trialEnd = sub.trial_end ?? sub.current_period_end;
      return {
        subscription_id: sub.id,
        status: 'active' as const,
        trial: true as const,
        trial_days: plan.trial_days,
        trial_end: trialEnd,
        // When the first payment is due is what a person starting a trial wants to know.
        message: `Your ${plan.trial_days}-day free trial of ${plan.name} has started; it ends on ${utcMinute(trialEnd)}`,
        manage_url,
      };
    }
    return { ...created.checkout, subscription_id: sub.id, manage_url };
  });

/**
 * The NWC service's subscribe (`POST /public/subscribe/nwc` after it validated the connection string):
 * the same subscribe with payment_method 'nwc', answering the invoice its wallet is to pay. A wallet
 * limit below the plan's price is refused before anything is written.
 */
export const subscribeNwc = (d: Deps) =>
  messageHandler(messages.subscribeNwc, async (body) => {
    const input = { ...body, payment_method: 'nwc' as const };
    const { plan, sub, manage_url, created } = await openSubscription(d, input, (p) => {
      if (body.max_amount_sats !== undefined && body.max_amount_sats < p.amount_sats) {
        throw invalid(['max_amount_sats'], `max_amount_sats (${body.max_amount_sats}) is below the plan's price of ${p.amount_sats} sats`);
      }
    }).catch(retryPending(d, input));
    const p = created?.payment;
    return {
      subscription_id: sub.id,
      subscriber_id: sub.subscriber_id,
      wallet_id: sub.wallet_id,
      plan_name: plan.name,
      manage_url,
      payment: p ? { id: p.id, payment_request: p.payment_request!, payment_hash: p.payment_hash!, amount_sats: p.amount_sats } : null,
      ...(p ? {} : { trial: { days: plan.trial_days, end: sub.trial_end ?? sub.current_period_end } }),
    };
  });
