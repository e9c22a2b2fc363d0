import type { PaymentPurpose, SubscriptionStatus } from '@sb/contracts';
import { type LifecycleEvent, paidBeforeStop, paidFirst } from './lifecycle.js';
import { PENDING_EXPIRY_SECONDS } from './periods.js';
import { dunningEnd, type SchedulePolicy } from './schedule.js';

/** A paid payment as billing sees it when it arrives. */
interface PaidPayment {
  purpose: PaymentPurpose;
  amount_sats: number;
  paid_at: number;
  /** The instant it was recorded paid, to the millisecond, where known: orders it against a move of the same second. */
  paid_at_ms?: number | null;
  /** A renewal payment issued for the subscription's current period (the open one or one it replaced). */
  for_current_period: boolean;
}

type SubView = {
  status: SubscriptionStatus;
  cancelled_at: number | null;
  /** The cancel ended the period at once (an owner's `immediate`). */
  cancelled_immediately: boolean;
  paused_at: number | null;
  stopped_at_ms: number | null;
  amount_sats: number;
  current_period_start: number;
  current_period_end: number;
  grace_period_days: number;
  dunning_from: number | null;
  pending_since: number | null;
  /** 0 with no trial_end: never activated (a checkout not paid yet). */
  period_index: number;
  trial_end: number | null;
};

/**
 * When an expired subscription stopped taking renewal payments: 24 h after it last became pending when
 * that was after its period began (resumed after the period ended, then unpaid), else the end of its
 * dunning window.
 */
export function expiredAt(
  s: Pick<SubView, 'current_period_start' | 'current_period_end' | 'grace_period_days' | 'dunning_from' | 'pending_since'>,
  policy: SchedulePolicy,
): number {
  if (s.pending_since !== null && s.pending_since > s.current_period_start) return s.pending_since + PENDING_EXPIRY_SECONDS;
  return dunningEnd(s, policy);
}

/**
 * Where a paid payment goes. Every paid payment is recorded once: applied to its own subscription, or to
 * the contact's new pending checkout of the same plan (a late payment of an expired one), or not applied
 * with the reason the owner sees (they refund it).
 */
export type Application = { to: 'own'; event: LifecycleEvent } | { to: 'contact_pending'; event: LifecycleEvent } | { to: 'none'; reason: string };

/**
 * behaviour.md, "Payments": a late payment is applied to its subscription when that can still take it;
 * if the contact has since opened a new pending checkout of the same plan, it activates that one;
 * otherwise it is recorded as not applied.
 * `own`: the payment's subscription (undefined if unknown); `live`: the contact's live subscription to
 * the same plan, when it is another one than `own`.
 * A renewal paid while the subscription could still take it, but handled only after the sweep expired
 * it, is applied as it would have been in time (a new period from paid_at), unless the contact has
 * subscribed again since; so is one paid before the owner paused or cancelled it (the period moves on
 * from its end, and it stays paused or cancelled). "Before" is strictly before (paidFirst): in the
 * second of the owner's move the milliseconds of both decide, and without them the move came first.
 */
export function applicationOf(
  p: PaidPayment,
  own: SubView | undefined,
  live: SubView | undefined,
  policy: SchedulePolicy,
  plan: { archived: boolean } = { archived: false },
): Application {
  if (!own) return { to: 'none', reason: 'The subscription of this payment does not exist' };
  // Archiving cannot be undone: an ended subscription of an archived plan does not start again (found
  // from outside: a checkout paid after its expiry and the archive came back active, and renewed).
  if (plan.archived && own.status === 'expired') return { to: 'none', reason: 'The plan was archived; its subscriptions do not start again' };
  const at = p.paid_at_ms != null ? { at_ms: p.paid_at_ms } : {};
  const first = { type: 'first_payment', paid_at: p.paid_at, ...at } as const;
  const renewal = { type: 'renewal_payment', paid_at: p.paid_at, ...at } as const;
  const elsewhere = (): Application => {
    if (!live) return { to: 'none', reason: `The subscription is ${own.status}; the payment arrived too late to be applied` };
    if (live.status !== 'pending') return { to: 'none', reason: `The subscriber already has ${article(live.status)} ${live.status} subscription to this plan` };
    if (p.amount_sats < live.amount_sats)
      return { to: 'none', reason: `The amount is below the price of the subscriber's pending subscription (${live.amount_sats} sats)` };
    return { to: 'contact_pending', event: first };
  };
  if (p.purpose === 'checkout') {
    if (own.status === 'pending') return { to: 'own', event: first };
    // An expired checkout paid late: reactivated, unless the contact has another live subscription to the plan.
    if (own.status === 'expired' && own.cancelled_at === null) return live ? elsewhere() : { to: 'own', event: first };
    if (own.status === 'expired') return elsewhere();
    if (own.status === 'cancelled' && own.period_index === 0 && own.trial_end === null) {
      // Paid before the cancel, however late the payment's event: applied as it would have been in
      // time (activated, then cancelled), unless the contact has opened a new checkout of the plan since
      // (that one is activated, as for an expired checkout) or the cancel was immediate: a period ended at
      // the cancel would take the money for nothing, so it is not applied and the owner refunds it.
      // Strictly before: in the cancel's second only the milliseconds tell (paidFirst).
      if (own.cancelled_at !== null && paidFirst(p.paid_at, p.paid_at_ms, own.cancelled_at, own.stopped_at_ms)) {
        if (live) return elsewhere();
        if (own.cancelled_immediately) return { to: 'none', reason: 'The subscription was cancelled at once, before its first payment arrived' };
        return { to: 'own', event: first };
      }
      return { to: 'none', reason: 'The subscription was cancelled before its first payment arrived' };
    }
    return { to: 'none', reason: `The subscription is ${own.status}; its first payment was already made` };
  }
  if (own.status === 'pending' || own.status === 'payment_failed') return { to: 'own', event: renewal };
  if (own.status === 'active' || own.status === 'past_due') {
    return p.for_current_period ? { to: 'own', event: renewal } : { to: 'none', reason: 'The period this renewal was issued for is already paid' };
  }
  if ((own.status === 'paused' || own.status === 'cancelled') && p.for_current_period && paidBeforeStop(own, p.paid_at, p.paid_at_ms)) {
    return live ? elsewhere() : { to: 'own', event: renewal };
  }
  if (
    own.status === 'cancelled' &&
    own.cancelled_immediately &&
    own.cancelled_at !== null &&
    paidFirst(p.paid_at, p.paid_at_ms, own.cancelled_at, own.stopped_at_ms)
  ) {
    return { to: 'none', reason: 'The subscription was cancelled at once, after this renewal was paid' };
  }
  if (own.status === 'expired' && !live && p.paid_at < expiredAt(own, policy)) return { to: 'own', event: renewal };
  if (own.status === 'expired') return elsewhere();
  return { to: 'none', reason: `The subscription is ${own.status}` };
}

const article = (word: string) => (/^[aeiou]/.test(word) ? 'an' : 'a');
