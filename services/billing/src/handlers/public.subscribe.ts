import { CONTACTS_UNCHANGED, contactsUnchanged, messages, utcMinute } from '@sb/contracts';
import { messageHandler, routeHandler, invalid } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { checkedPlan, openCheckout } from '../subscribe.js';

/** Public checkout: an invoice, address or processor checkout for paid plans; an active trial otherwise. */
export const subscribe = (d: Deps) =>
  routeHandler('public.subscribe', async (req) => {
    const body = req.body;
    // An NWC subscription needs the wallet's connection string, which only the NWC service takes.
    if (body.payment_method === 'nwc') {
      throw invalid(['payment_method'], 'NWC subscriptions are made with POST /public/subscribe/nwc', 'value_error');
    }
    const { plan, sub, manage_url, created } = await openCheckout(d, { ...body, checkout_key: req.caller.idempotency_key });
    // A returning subscriber's other contact details were not stored: said, not dropped in silence.
    const unchanged = contactsUnchanged(body, manage_url);
    const told = unchanged ? { contacts_unchanged: true as const } : {};
    // Only when this request created the subscriber (behaviour.md): no key at all otherwise.
    const portal = manage_url ? { manage_url } : {};
    if (!created) {
      const trialEnd = sub.trial_end ?? sub.current_period_end;
      return {
        subscription_id: sub.id,
        status: 'active' as const,
        trial: true as const,
        trial_days: plan.trial_days,
        trial_end: trialEnd,
        // When the first payment is due is what a person starting a trial wants to know.
        message: `Your ${plan.trial_days}-day free trial of ${plan.name} has started; it ends on ${utcMinute(trialEnd)}${unchanged ? `. ${CONTACTS_UNCHANGED}` : ''}`,
        ...portal,
        ...told,
      };
    }
    return { ...created.checkout, subscription_id: sub.id, ...portal, ...told };
  });

/**
 * The NWC service's subscribe (`POST /public/subscribe/nwc` after it validated the connection string):
 * the same subscribe with payment_method 'nwc', answering the invoice its wallet is to pay. A wallet
 * limit below the plan's price is refused before anything is written.
 */
export const subscribeNwc = (d: Deps) =>
  messageHandler(messages.subscribeNwc, async (body) => {
    const { plan, sub, manage_url, created } = await openCheckout(d, { ...body, payment_method: 'nwc' });
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

/** `subscribeNwc`'s refusals, before the NWC service contacts the wallet (see messages.subscribeNwcCheck). */
export const subscribeNwcCheck = (d: Deps) =>
  messageHandler(messages.subscribeNwcCheck, async (body) => {
    await checkedPlan(d, { ...body, payment_method: 'nwc' });
    return { ok: true as const };
  });
