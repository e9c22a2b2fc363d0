import type { CancelledBy, EventName, Interval, SubscriptionStatus } from '@sb/contracts';
import { conflict, invalidFields } from './errors.js';
import { DAY_SECONDS, dunningStart, dunningStartAt, graceEnd, LATEST_TIME, notPastLatest, periodEnd } from './periods.js';
import { renewableUntil, type SchedulePolicy } from './schedule.js';

/** What the lifecycle reads and writes of a subscription: one row, changed only through `transition`. */
export interface SubState {
  status: SubscriptionStatus;
  interval: Interval;
  grace_period_days: number;
  /**
   * Periods are computed from this anchor: period k ends at periodEnd(anchor, k - anchor_index). A
   * checkout's is where an extend moved its empty period's end: what its first payment adds.
   */
  period_anchor: number;
  /** The period the anchor was set in: 0 from a start, the period extended when an extend re-anchored. */
  anchor_index: number;
  period_index: number;
  current_period_start: number;
  current_period_end: number;
  trial_end: number | null;
  cancelled_at: number | null;
  cancel_reason: string | null;
  /** Who cancelled, from where the cancel came in (null: none, or cancelled before it was recorded). */
  cancelled_by: CancelledBy | null;
  /** The cancel ended the period at once (an owner's `immediate`): a first payment made before it, handled after, is not applied. */
  cancelled_immediately: boolean;
  /**
   * When the owner paused it; null once resumed (so a cancelled row with one was cancelled while paused).
   * A renewal paid before it, handled after, is still applied (paidBeforeStop).
   */
  paused_at: number | null;
  /**
   * The instant, to the millisecond, of the pause or the cancel that stopped renewals (stoppedAt): a
   * payment made in the same second is ordered by it. Null where unknown (before migration 19).
   */
  stopped_at_ms: number | null;
  /** When the subscription last became pending (checkout, or resumed after its period ended): its 24 h count from here. */
  pending_since: number | null;
  /**
   * Where the dunning window of payment_failed starts once an extend moved the period end: the end of the
   * grace of the period that lapsed (null: the grace end of the current period). See dunningStart.
   */
  dunning_from: number | null;
}

/**
 * `at_ms`: when the event happened, to the millisecond, where the caller knows it (an owner's move, a
 * payment's record): times are whole seconds, and only this orders two events of one second.
 */
export type LifecycleEvent = { at_ms?: number } & (
  | { type: 'first_payment'; paid_at: number }
  | { type: 'renewal_payment'; paid_at: number }
  | { type: 'pending_timeout' }
  /** The payment for a checkout could not be created: the checkout ends at once. */
  | { type: 'checkout_failed' }
  | { type: 'period_end_unpaid' }
  | { type: 'grace_end_unpaid' }
  | { type: 'dunning_end_unpaid' }
  | { type: 'pause' }
  | { type: 'resume' }
  /** `by`: the portal's cancel is the subscriber's, the API's the owner's, whatever `reason` says. */
  | { type: 'cancel'; immediate: boolean; by: 'subscriber' | 'merchant'; reason?: string | null }
  | { type: 'plan_archived' }
  | { type: 'extend'; days: number }
);

export const LIVE: readonly SubscriptionStatus[] = ['pending', 'active', 'paused', 'past_due', 'payment_failed'];
export const TERMINAL: readonly SubscriptionStatus[] = ['cancelled', 'expired'];
/** Live and not paused: a renewal invoice of these can be paid. */
export const RENEWABLE: readonly SubscriptionStatus[] = LIVE.filter((s) => s !== 'paused');

type EventType = LifecycleEvent['type'];
type RuleOn<T extends EventType> = {
  from: readonly SubscriptionStatus[];
  on: T;
  /** Extra condition for this row; rows are tried in order. */
  when?: (s: SubState, now: number, e: Extract<LifecycleEvent, { type: T }>) => boolean;
  emit: EventName;
  apply: (s: SubState, e: Extract<LifecycleEvent, { type: T }>, now: number) => Partial<SubState>;
};
/** A row of the table: its `apply` sees the event it is for, typed by `on`. */
type Rule = { [T in EventType]: RuleOn<T> }[EventType];

/** Never paid: no trial, no period yet (a checkout, or one cancelled before its payment was handled). */
const isCheckout = (s: Pick<SubState, 'period_index' | 'trial_end'>) => s.period_index === 0 && s.trial_end === null;

/**
 * A new period starting at `at`: the anchor moves there (first payment, or paid after payment_failed).
 * Days the owner granted with an extend before it are kept, moved onto the new period as an extend would
 * move them: a checkout's whole extension (its "period" is empty until paid; once cancelled it ends
 * where it began, and the extension is where an extend set the anchor), else the days of the old end
 * still ahead of `at`.
 */
const freshPeriod = (s: SubState, at: number): Partial<SubState> => {
  const fresh = { status: 'active' as const, period_index: 1, current_period_start: at, dunning_from: null };
  if (isCheckout(s)) {
    // After the paid period, as an extend made after the payment puts them (found from outside: put before
    // the month, a checkout extended 30 days got 61 days paid on 6 February, 58 extended after it).
    const granted = Math.max(0, checkoutExtension(s));
    const end = notPastLatest(periodEnd(at, 1, s.interval), granted);
    return { ...fresh, ...(granted > 0 ? { period_anchor: end, anchor_index: 1 } : { period_anchor: at, anchor_index: 0 }), current_period_end: end };
  }
  // The days of the extended end still ahead: the period runs a whole interval past that end, the fixed
  // date the dunning notices promised "if paid by" (renewalTerms), whenever the payment comes.
  const anchor = at + Math.max(0, s.current_period_end - at);
  return { ...fresh, period_anchor: anchor, anchor_index: 0, current_period_end: periodEnd(anchor, 1, s.interval) };
};

/**
 * The days extends granted a checkout, kept for its first payment: where they moved its empty period's
 * end, or, once a cancel set that back to the start, where they moved the anchor.
 */
const checkoutExtension = (s: SubState) => Math.max(s.current_period_end, s.period_anchor) - s.current_period_start;
/** Into payment_failed: a step the scheduler makes late has its dunning window from now (dunningStartAt). */
const paymentFailed = (s: SubState, now: number): Partial<SubState> => {
  const from = dunningStartAt(s, now);
  return from === now ? { status: 'payment_failed', dunning_from: now } : { status: 'payment_failed' };
};
/**
 * The period as a cancel leaves it: a cancel keeps the access there was, and never grants any. At once,
 * or from a state without access (a checkout or a resume not paid, payment_failed, paused past its end),
 * the period ends now, however far an extend had moved its end (those days count once a period is
 * paid); a period paid ahead that had not begun (a renewal paid early) starts now too, and a trial still
 * running ends now. A checkout's empty period ends where it began, as it was before any extend.
 */
const periodAtCancel = (s: SubState, immediate: boolean, now: number): Partial<SubState> => {
  if (!immediate && hasAccess(s, now)) return {};
  const start = Math.min(s.current_period_start, now);
  return {
    current_period_start: start,
    current_period_end: isCheckout(s) ? start : Math.min(s.current_period_end, now),
    trial_end: s.trial_end === null ? null : Math.min(s.trial_end, now),
  };
};

/**
 * The trial still runs: the period is the trial's, it gives access, and it has not ended by the clock.
 * Not as grace after the trial ended unpaid (past_due), nor past its end before a sweep marks it so (an
 * active row the scheduler has not reached yet is no trial any more). An extend moves trial_end only
 * then (behaviour.md: "during a trial").
 */
export const inTrial = <S extends Pick<SubState, 'status' | 'current_period_end' | 'trial_end'>>(s: S, now: number): s is S & { trial_end: number } =>
  s.trial_end !== null && s.trial_end >= s.current_period_end && s.status !== 'past_due' && now < s.current_period_end && hasAccess(s, now);

/**
 * What a cancellation's notice needs of the subscription as it was (found from outside: a cancelled
 * trial was told "You will not be charged again"): cancelled in its free trial, and never paid (no
 * payment ever applied: period_index moves from 0 with the first).
 */
export function cancelledFacts(s: SubState, now: number): { in_trial?: true; never_paid?: true } {
  return {
    ...(inTrial(s, now) ? { in_trial: true as const } : {}),
    ...(s.period_index === 0 ? { never_paid: true as const } : {}),
  };
}

/** The next period continues from the old end: no gap, no overlap. */
const nextPeriod = (s: SubState): Partial<SubState> => ({
  status: 'active',
  period_index: s.period_index + 1,
  current_period_start: s.current_period_end,
  current_period_end: periodEnd(s.period_anchor, s.period_index + 1 - s.anchor_index, s.interval),
});

/**
 * The whole subscription lifecycle (behaviour.md), one row per allowed move. Anything not listed is 409.
 * `emit` is the event written to the outbox in the same transaction as the move.
 */
const LIFECYCLE: readonly Rule[] = [
  { from: ['pending'], on: 'first_payment', emit: 'subscription.activated', apply: (s, e) => freshPeriod(s, e.paid_at) },
  // A checkout paid before it was cancelled, handled after (domain/payment-application.ts decides that):
  // as if handled in time, activated then cancelled; it stays cancelled, with the paid period. One event,
  // the activation the cancel came after. Not after an immediate cancel: its period would end at the
  // cancel, so the payment would buy nothing (it is recorded as not applied, for a refund).
  {
    from: ['cancelled'],
    on: 'first_payment',
    when: (s) => s.period_index === 0 && s.trial_end === null && s.cancelled_at !== null && !s.cancelled_immediately,
    emit: 'subscription.activated',
    apply: (s, e) => ({ ...freshPeriod(s, e.paid_at), status: 'cancelled' }),
  },
  // A late payment for a checkout that already expired is still applied (on-chain can be late).
  { from: ['expired'], on: 'first_payment', when: (s) => s.cancelled_at === null, emit: 'subscription.activated', apply: (s, e) => freshPeriod(s, e.paid_at) },
  { from: ['pending'], on: 'pending_timeout', emit: 'subscription.expired', apply: () => ({ status: 'expired' }) },
  { from: ['pending'], on: 'checkout_failed', emit: 'subscription.expired', apply: () => ({ status: 'expired' }) },
  { from: ['active', 'past_due'], on: 'renewal_payment', emit: 'subscription.renewed', apply: (s) => nextPeriod(s) },
  { from: ['payment_failed', 'pending'], on: 'renewal_payment', emit: 'subscription.renewed', apply: (s, e) => freshPeriod(s, e.paid_at) },
  // A renewal paid before a pause or a cancel, handled after it (domain/payment-application.ts decides
  // that): as if handled in time, the period moves on from the old end; it stays paused or cancelled,
  // with access to the new end.
  {
    from: ['paused', 'cancelled'],
    on: 'renewal_payment',
    when: (s, _now, e) => paidBeforeStop(s, e.paid_at, e.at_ms),
    emit: 'subscription.renewed',
    apply: (s) => ({ ...nextPeriod(s), status: s.status }),
  },
  // A renewal paid inside the dunning window but handled after the sweep expired the subscription
  // (domain/payment-application.ts decides that): renewed as it would have been in time.
  { from: ['expired'], on: 'renewal_payment', when: (s) => s.cancelled_at === null, emit: 'subscription.renewed', apply: (s, e) => freshPeriod(s, e.paid_at) },
  { from: ['active'], on: 'period_end_unpaid', when: (s) => s.grace_period_days > 0, emit: 'subscription.past_due', apply: () => ({ status: 'past_due' }) },
  { from: ['active'], on: 'period_end_unpaid', emit: 'subscription.payment_failed', apply: (s, _e, now) => paymentFailed(s, now) },
  { from: ['past_due'], on: 'grace_end_unpaid', emit: 'subscription.payment_failed', apply: (s, _e, now) => paymentFailed(s, now) },
  // The dunning window ended unpaid: the contact is free to subscribe again.
  { from: ['payment_failed'], on: 'dunning_end_unpaid', emit: 'subscription.expired', apply: () => ({ status: 'expired' }) },
  {
    from: ['active', 'past_due'],
    on: 'pause',
    emit: 'subscription.paused',
    apply: (_s, e, now) => ({ status: 'paused', paused_at: now, stopped_at_ms: msIn(now, e.at_ms) }),
  },
  {
    from: ['paused'],
    on: 'resume',
    when: (s, now) => now < s.current_period_end,
    emit: 'subscription.resumed',
    apply: () => ({ status: 'active', paused_at: null, stopped_at_ms: null }),
  },
  {
    from: ['paused'],
    on: 'resume',
    emit: 'subscription.resumed',
    apply: (_s, _e, now) => ({ status: 'pending', pending_since: now, paused_at: null, stopped_at_ms: null }),
  },
  {
    from: LIVE,
    on: 'cancel',
    emit: 'subscription.cancelled',
    apply: (s, e, now) => ({
      status: 'cancelled',
      cancelled_at: now,
      cancel_reason: e.reason ?? null,
      cancelled_by: e.by,
      cancelled_immediately: e.immediate,
      ...stopAt(s, e, now),
      ...periodAtCancel(s, e.immediate, now),
    }),
  },
  {
    from: LIVE,
    on: 'plan_archived',
    emit: 'subscription.cancelled',
    apply: (s, e, now) => ({
      status: 'cancelled',
      cancelled_at: now,
      cancel_reason: 'plan archived',
      cancelled_by: 'plan_archived',
      cancelled_immediately: false,
      ...stopAt(s, e, now),
      ...periodAtCancel(s, false, now),
    }),
  },
  {
    from: [...LIVE, ...TERMINAL],
    on: 'extend',
    emit: 'subscription.extended',
    // Later periods count whole intervals from the new end (a month after it, its day of the month kept):
    // moving the anchor by the same days would land elsewhere when the months differ in length.
    apply: (s, e, now) => {
      // A cancelled checkout keeps earlier extends' days in its anchor (its end went back to its start):
      // these come on top (found from outside: an extend after the cancel dropped them, and a payment made
      // before the cancel bought 20 days less than the owner had granted). Its end stays at its start: the
      // days wait for a payment, as a pending checkout's do, and give no access before it (found in review).
      const from = isCheckout(s) ? s.current_period_start + checkoutExtension(s) : s.current_period_end;
      const anchor = from + e.days * DAY_SECONDS;
      if (anchor > LATEST_TIME) {
        const left = Math.floor((LATEST_TIME - from) / DAY_SECONDS);
        const msg = `The period would end after 9999-12-31; at most ${Math.max(0, left)} more days can be added`;
        throw invalidFields([{ in: 'query', field: ['days'], msg, type: 'value_error' }]);
      }
      const waits = isCheckout(s) && s.status === 'cancelled';
      return {
        current_period_end: waits ? s.current_period_end : anchor,
        period_anchor: anchor,
        anchor_index: s.period_index,
        ...(inTrial(s, now) ? { trial_end: s.trial_end + e.days * DAY_SECONDS } : {}),
        // Without access the days wait for a payment; the time left to make it stays what it was.
        ...(s.status === 'payment_failed' ? { dunning_from: dunningStart(s) } : {}),
      };
    },
  },
];

interface Transition {
  next: SubState;
  event: EventName;
}

// The row was found by `on === e.type`, so `e` is the event its `when` and `apply` are typed for.
const ruleFor = (s: SubState, e: LifecycleEvent, now: number) =>
  LIFECYCLE.find(
    (r) => r.on === e.type && r.from.includes(s.status) && (!r.when || (r.when as (s: SubState, now: number, e: LifecycleEvent) => boolean)(s, now, e)),
  );

/** Applies one event, or throws 409 when the table has no row for it. Pure: the caller does the compare-and-set. */
export function transition(s: SubState, e: LifecycleEvent, now: number): Transition {
  const rule = ruleFor(s, e, now);
  if (!rule) {
    // Asked twice (another tab, the seller first): said as what it is, not as a move that makes no sense.
    const already = (e.type === 'cancel' && s.status === 'cancelled') || (e.type === 'pause' && s.status === 'paused');
    throw conflict(already ? `This subscription is already ${s.status}` : `Cannot ${e.type.replace(/_/g, ' ')} a subscription that is ${s.status}`);
  }
  const apply = rule.apply as (s: SubState, e: LifecycleEvent, now: number) => Partial<SubState>;
  return { next: { ...s, ...apply(s, e, now) }, event: rule.emit };
}

/**
 * The period a renewal payment made at `at` pays for, by the same table a payment is applied by: from
 * the current period's end while it can be paid in time (active, past_due); a new period from the
 * payment once access has ended (payment_failed) or after a resume past the period's end (pending).
 * Null where no renewal applies (paused, cancelled: only one paid before that applies). What reminders and dunning notices say it covers.
 */
export function renewalPeriod(s: SubState, at: number): { start: number; end: number } | null {
  const e = { type: 'renewal_payment', paid_at: at } as const;
  if (!ruleFor(s, e, at)) return null;
  const { next } = transition(s, e, at);
  return { start: next.current_period_start, end: next.current_period_end };
}

/**
 * What a notice may promise of that period, which depends on when the subscriber pays, not when it is
 * sent: one continuing from the current end holds while that end is kept (`if_paid_by`, the end of
 * grace: paid later, in payment_failed, a new period starts at the payment); one starting at the
 * payment has no dates until then (`from_payment`; its dates here are those if paid at `at`).
 * `if_paid_by` is never after the renewal stops being payable (renewableUntil): an extend of a
 * payment_failed subscription moves its end but not its dunning window, so days granted beyond that
 * window hold for any payment still possible, and none can be made after it.
 */
export function renewalTerms(
  s: SubState,
  at: number,
  p: SchedulePolicy,
): ({ start: number; end: number } & ({ if_paid_by: number } | { from_payment: true; if_paid_by?: number })) | null {
  const period = renewalPeriod(s, at);
  if (!period) return null;
  const until = renewableUntil(s, p);
  const payableBy = (t: number) => (until === null ? t : Math.min(t, until));
  if (period.start === s.current_period_end) return { ...period, if_paid_by: payableBy(graceEnd(s)) };
  // Days an extend granted beyond the payment (payment_failed extended): the new period starts at the
  // payment but ends at a fixed date while they last (freshPeriod keeps them).
  return s.current_period_end > at ? { ...period, from_payment: true, if_paid_by: payableBy(s.current_period_end) } : { ...period, from_payment: true };
}

/**
 * The notice switches asked for a subscription, or 409 when it has ended: an ended one gets no renewal and
 * no payment applies to it, so it is sent neither reminders nor confirmations (cancellation notices go
 * regardless), and a changed switch would claim a choice that does nothing. Switches sent as they are
 * change nothing and pass (an owner's PUT that echoes the subscription to change its metadata).
 */
export function noticeSwitches(
  s: Pick<SubState, 'status'> & Record<NoticeSwitch, boolean>,
  asked: Partial<Record<NoticeSwitch, boolean | undefined>>,
): Record<NoticeSwitch, boolean> {
  const next = {
    receive_reminders: asked.receive_reminders ?? s.receive_reminders,
    receive_confirmations: asked.receive_confirmations ?? s.receive_confirmations,
  };
  const changed = next.receive_reminders !== s.receive_reminders || next.receive_confirmations !== s.receive_confirmations;
  if (changed && TERMINAL.includes(s.status)) throw conflict(`This subscription has ended (${s.status}): it gets no more reminders or confirmations`);
  return next;
}
type NoticeSwitch = 'receive_reminders' | 'receive_confirmations';

/**
 * The seller's channels that reach this subscriber: those they gave a contact for. A seller on Telegram
 * alone reaches no one known by e-mail only, so the portal offers no switches for messages that cannot
 * come (found from outside).
 */
export function channelsReaching(channels: string[], contacts: Partial<Record<'email' | 'messenger' | 'nostr', string | null>>): string[] {
  return channels.filter((c) => !!contacts[c as keyof typeof contacts]);
}

/** The cancel reason each canceller is shown to the subscriber with. */
const REASON_FOR_SUBSCRIBER: Record<CancelledBy, string> = {
  subscriber: 'cancelled by subscriber',
  merchant: 'cancelled by the merchant',
  plan_archived: 'plan archived',
};
/** Who cancelled as recorded; before `cancelled_by` existed, read from the reasons this service wrote itself. */
function recordedCanceller(s: Pick<SubState, 'cancel_reason' | 'cancelled_by'>): CancelledBy | null {
  if (s.cancelled_by) return s.cancelled_by;
  if (!s.cancel_reason) return null;
  if (s.cancel_reason === REASON_FOR_SUBSCRIBER.subscriber) return 'subscriber';
  return s.cancel_reason === REASON_FOR_SUBSCRIBER.plan_archived ? 'plan_archived' : 'merchant';
}

/** Who cancelled, for the owner: an old cancel without a reason came from the API, the only way to leave none. */
export function whoCancelled(s: Pick<SubState, 'status' | 'cancel_reason' | 'cancelled_by'>): CancelledBy | null {
  return recordedCanceller(s) ?? (s.status === 'cancelled' ? 'merchant' : null);
}

/**
 * The cancel reason as the subscriber may see it, from who cancelled: an owner's free text (an internal
 * note, which may read "cancelled by subscriber") is not theirs to read.
 */
export function reasonForSubscriber(s: Pick<SubState, 'cancel_reason' | 'cancelled_by'>): string | null {
  const who = recordedCanceller(s);
  return who ? REASON_FOR_SUBSCRIBER[who] : null;
}

/**
 * When the subscription stopped taking renewals: its pause, or its cancel (the pause before it, when it
 * was cancelled while paused). Null while it takes them.
 */
const stoppedAt = (s: Pick<SubState, 'status' | 'paused_at' | 'cancelled_at'>): number | null =>
  s.status === 'paused' ? s.paused_at : s.status === 'cancelled' ? (s.paused_at ?? s.cancelled_at) : null;

/** `ms` if it falls in the second `at` (another reading of the clock may not), else null: unknown. */
const msIn = (at: number, ms: number | null | undefined): number | null => (ms != null && Math.floor(ms / 1000) === at ? ms : null);

/** A cancel's instant as stoppedAt takes it: a cancel while paused keeps the pause's. */
const stopAt = (s: SubState, e: LifecycleEvent, now: number): Pick<SubState, 'stopped_at_ms'> => ({
  stopped_at_ms: s.status === 'paused' ? s.stopped_at_ms : msIn(now, e.at_ms),
});

/**
 * A payment at `paidAt` came strictly before a stop at `stopAt`. Times are whole seconds; in one second
 * only the milliseconds of both can order them, and where either is unknown the payment may have come
 * after, so the tie goes to the owner's move. The two are read from the clocks of two processes
 * (payments', billing's): across machines a few milliseconds of skew can misorder two events that close,
 * and then a payment just after the move renews the period it paid for, the move still made.
 */
export function paidFirst(paidAt: number, paidMs: number | null | undefined, stopAt: number, stopMs: number | null | undefined): boolean {
  if (paidAt !== stopAt) return paidAt < stopAt;
  const paid = msIn(paidAt, paidMs);
  const stop = msIn(stopAt, stopMs);
  return paid !== null && stop !== null && paid < stop;
}

/**
 * A renewal paid at `paidAt` came before the pause or the cancel, while the period could still go on
 * from its end (active or past_due: before the grace ended, not resumed after its end and unpaid), so
 * it is applied as it would have been in time. Strictly before (paidFirst): in the move's second only
 * the milliseconds of both tell, and without them the tie goes to the move. Not after a
 * cancel at once: the access it paid for was ended by the owner (the payment is left for a refund).
 */
export function paidBeforeStop(
  s: Pick<
    SubState,
    | 'status'
    | 'paused_at'
    | 'stopped_at_ms'
    | 'cancelled_at'
    | 'cancelled_immediately'
    | 'current_period_start'
    | 'current_period_end'
    | 'grace_period_days'
    | 'pending_since'
  >,
  paidAt: number,
  paidMs?: number | null,
): boolean {
  const stopped = stoppedAt(s);
  if (stopped === null || !paidFirst(paidAt, paidMs, stopped, s.stopped_at_ms) || s.cancelled_immediately) return false;
  const resumedUnpaid = s.pending_since !== null && s.pending_since > s.current_period_start;
  return paidAt < graceEnd(s) && !resumedUnpaid;
}

/** Access continues while active or past_due, and while paused or cancelled until the paid period ends. */
export function hasAccess(s: Pick<SubState, 'status' | 'current_period_end'>, now: number): boolean {
  if (s.status === 'active' || s.status === 'past_due') return true;
  if (s.status === 'paused' || s.status === 'cancelled') return now < s.current_period_end;
  return false;
}

/**
 * Until when access lasts unless a payment renews it: the period's end; while past_due, the end of the
 * grace period. Null without access.
 */
export function accessUntil(s: Pick<SubState, 'status' | 'current_period_end' | 'grace_period_days'>, now: number): number | null {
  if (!hasAccess(s, now)) return null;
  return s.status === 'past_due' ? graceEnd(s) : s.current_period_end;
}

/**
 * Until when access would last if the subscriber cancelled now (the portal's cancel), by the move the
 * cancel makes: null when cancelling ends it at once (a past_due grace is time to pay in, not paid
 * time) or there is none, and for one that has ended. What the portal's cancel dialog promises.
 */
export function accessAfterCancel(s: SubState, now: number): number | null {
  if (!LIVE.includes(s.status)) return null;
  return accessUntil(transition(s, { type: 'cancel', immediate: false, by: 'subscriber' }, now).next, now);
}

/** The "(new)" rows: a plan with a trial starts active until trial_end; a paid plan starts pending. */
export function startSubscription(plan: { interval: Interval; trial_days: number; grace_period_days: number }, now: number): SubState {
  const base = {
    interval: plan.interval,
    grace_period_days: plan.grace_period_days,
    cancelled_at: null,
    cancel_reason: null,
    cancelled_by: null,
    cancelled_immediately: false,
    paused_at: null,
    stopped_at_ms: null,
    pending_since: null,
    dunning_from: null,
  };
  if (plan.trial_days > 0) {
    const trialEnd = notPastLatest(now, plan.trial_days * DAY_SECONDS);
    return {
      ...base,
      status: 'active',
      period_anchor: trialEnd,
      anchor_index: 0,
      period_index: 0,
      current_period_start: now,
      current_period_end: trialEnd,
      trial_end: trialEnd,
    };
  }
  return {
    ...base,
    status: 'pending',
    pending_since: now,
    period_anchor: now,
    anchor_index: 0,
    period_index: 0,
    current_period_start: now,
    current_period_end: now,
    trial_end: null,
  };
}
