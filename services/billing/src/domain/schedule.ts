import { EXPIRED_BECAUSE, type Interval, type PaymentMethod, type SubscriptionStatus } from '@sb/contracts';
import type { LifecycleEvent } from './lifecycle.js';
import {
  DAY_SECONDS,
  dunningStart,
  dunningStartAt,
  graceEnd,
  hasNextPeriod,
  PENDING_EXPIRY_SECONDS,
  REMINDER_BEFORE_END_SECONDS,
  RENEWAL_LEAD_SECONDS,
} from './periods.js';

/** What the time-driven rules read of a subscription: its lifecycle fields and the renewal bookkeeping. */
export interface ScheduleView {
  status: SubscriptionStatus;
  interval: Interval;
  grace_period_days: number;
  current_period_start: number;
  current_period_end: number;
  trial_end: number | null;
  pending_since: number | null;
  /** Where the dunning window starts when an extend moved a payment_failed period's end (see dunningStart). */
  dunning_from: number | null;
  payment_method: PaymentMethod;
  receive_reminders: boolean;
  /** The period end the open renewal payment was issued for (null: none issued for any period yet). */
  renewal_for: number | null;
  renewal_payment_id: string | null;
  /** When the open renewal payment stops being payable (or was withdrawn, by a pause). */
  renewal_expires_at: number | null;
  /** The period end whose last call (or NWC trial notice) went out. */
  reminded_for: number | null;
  /** When a renewal reminder last reached the subscriber. */
  reminder_notified_at: number | null;
  nwc_next_attempt_at: number | null;
  nwc_fallback: boolean;
  nwc_charging_since: number | null;
  /** The period end whose renewal payment the payments service last refused to make (see renewalRefused). */
  renewal_refused_for: number | null;
  /** When it refused. */
  renewal_refused_at: number | null;
  /** Why, in the payments service's words: the owner's events name it. */
  renewal_refused_reason: string | null;
}

export interface SchedulePolicy {
  /** How long payment_failed lasts, with a payable renewal payment, before the subscription expires. */
  dunning_days: number;
}

/** Replacement invoices of one renewal reach the subscriber at most this often. */
const NOTIFY_REPLACEMENT_EVERY_S = 7 * DAY_SECONDS;
/** An NWC wallet that did not pay at period end is asked again after an hour, then daily, during the grace period. */
const NWC_FIRST_RETRY_S = 3600;
const NWC_RETRY_S = DAY_SECONDS;
/** Longer than a wallet may take to answer (the charge's bus wait, 40 s): a crashed replica's charge is retried after it. */
const NWC_CHARGE_WINDOW_S = 120;
/**
 * Longer than a resume takes to make its renewal payment (an NWC wallet's charge included, 45 s): a resume
 * whose payment was not made by then (the payments service away, a crash after the commit) gets it from
 * the scheduler.
 */
const RESUME_PAYMENT_AFTER_S = 120;
/**
 * A renewal payment the payments service refused to make (the rail switched off, a price under the card
 * processor's minimum at today's rate) is asked for again this much later: as often as an invoice is
 * replaced, not at every sweep (each ask is a provider call), and the rate or the setting may change.
 */
const REFUSED_RETRY_S = DAY_SECONDS;
/** A resume's payment refused is asked again sooner: the resume has 24 hours, so a daily ask would be its last. */
const RESUME_REFUSED_RETRY_S = 3600;

/**
 * The one thing due for a subscription at a time. The scheduler only carries these out; every
 * time-driven rule of the lifecycle is decided here.
 */
export type Due =
  /**
   * The period ran out unpaid (past_due, payment_failed, then expired at the end of dunning), or an unpaid
   * checkout reached its 24 h. The subscriber hears of each step of dunning (of the first two only when
   * they take reminders: the renewal is still payable until `pay_by`), not of an unpaid checkout's expiry.
   */
  | {
      kind: 'lapse';
      event: Extract<LifecycleEvent['type'], 'pending_timeout' | 'period_end_unpaid' | 'grace_end_unpaid' | 'dunning_end_unpaid'>;
      notify_subscriber: boolean;
      reason?: string;
      pay_by?: number;
      /** NWC: the wallet is asked again through the grace period (the subscriber may also pay by hand). */
      wallet_retries?: true;
      /** NWC: the connected wallet was asked and did not pay (notices say so, not just "unpaid"). */
      wallet_failed?: true;
      /** The period that ended unpaid was a free trial. */
      after_trial?: true;
      /** No invoice could be made for the renewal: the payments service refused it (renewal_refused_for). */
      renewal_refused?: true;
      /** No invoice was made for the period yet (the scheduler was away): it is asked for right after. */
      invoice_to_follow?: true;
    }
  /** Create the period's renewal payment (or a replacement of `replaces`) and send it out in a reminder. */
  | { kind: 'renewal_payment'; replaces: string | null; last_call: boolean; notify_subscriber: boolean; trial_ending: boolean }
  /** The reminder a day before the period ends, while the renewal is unpaid. */
  | { kind: 'last_call'; notify_subscriber: boolean }
  /** NWC: ask the wallet to pay the renewal (at period end, then on the retry schedule). */
  | { kind: 'charge_wallet'; first: boolean; retry_at: number }
  /** NWC: no invoice goes ahead of time, but the end of a trial is announced a day before. */
  | { kind: 'trial_ending' }
  /**
   * Resumed after its period ended, and the resume did not finish: its renewal payment not made (see
   * resumeBookkeeping), or its NWC wallet asked and no reminder sent after the charge window.
   */
  | { kind: 'resume_payment' }
  | { kind: 'none' };

const NONE: Due = { kind: 'none' };

/** An NWC subscription whose wallet still pays: charged at period end, not invoiced ahead. */
const autoPays = (s: Pick<ScheduleView, 'payment_method' | 'nwc_fallback'>) => s.payment_method === 'nwc' && !s.nwc_fallback;

export const dunningEnd = (s: Pick<ScheduleView, 'current_period_start' | 'current_period_end' | 'grace_period_days' | 'dunning_from'>, p: SchedulePolicy) =>
  dunningStart(s) + p.dunning_days * DAY_SECONDS;

/** The end of the dunning window a step into payment_failed at `now` opens (dunningStartAt). */
const dunningEndAt = (
  s: Pick<ScheduleView, 'current_period_start' | 'current_period_end' | 'grace_period_days' | 'dunning_from'>,
  now: number,
  p: SchedulePolicy,
) => dunningStartAt(s, now) + p.dunning_days * DAY_SECONDS;

/**
 * The renewal is overdue: the period it would follow has ended unpaid (payment_failed; past_due from its
 * period end on). A past_due subscription whose end an extend moved past now keeps its state
 * (behaviour.md) but is not behind until that new end: it is renewed as an active one is (its open
 * invoice carried along, replaced from the new lead time, its wallet charged at the new end) and its grace
 * runs from there. Taken as overdue, it was invoiced daily and reminded weekly until then.
 */
export const renewalOverdue = (s: Pick<ScheduleView, 'status' | 'current_period_end'>, now: number) =>
  s.status === 'payment_failed' || (s.status === 'past_due' && now >= s.current_period_end);

/**
 * Until when an unpaid renewal can still be paid and the subscription kept (past_due, payment_failed):
 * the end of the dunning window, not the expiry of the invoice open now (one replaces it when it expires).
 * Null in every other state.
 */
export const renewableUntil = (
  s: Pick<ScheduleView, 'status' | 'current_period_start' | 'current_period_end' | 'grace_period_days' | 'dunning_from'>,
  p: SchedulePolicy,
): number | null => (s.status === 'past_due' || s.status === 'payment_failed' ? dunningEnd(s, p) : null);

/**
 * What is due for `s` at `now` (behaviour.md, "Renewals" and the lifecycle table's time-driven rows):
 * - pending: expires 24 h after it became pending;
 * - a renewal payment a lead time before the period ends (weekly 1 day, monthly 3, yearly 7), with a
 *   reminder; NWC wallets are charged at the period end instead, and retried after 1 h, then daily,
 *   while the grace period lasts;
 * - a new invoice whenever the open one expired (or was withdrawn by a pause), as long as the
 *   subscription can still be renewed: through grace and through the dunning window of payment_failed;
 * - the last call a day before the end; past_due at the end (with grace), payment_failed at the end of
 *   grace, expired at the end of the dunning window.
 * Paused subscriptions have nothing due (the owner's choice); terminal ones never do.
 */
/** Pending since a resume after its period ended (pending since after the period began), not a checkout. */
export const pendingSinceResume = (s: Pick<ScheduleView, 'pending_since' | 'current_period_start'>): boolean =>
  s.pending_since !== null && s.pending_since > s.current_period_start;

/** A checkout not paid yet (not a resume's payment, which has periods behind it). */
export const awaitingFirstPayment = (s: Pick<ScheduleView, 'status' | 'pending_since' | 'current_period_start'>): boolean =>
  s.status === 'pending' && !pendingSinceResume(s);

/**
 * The payments service refused, less than `retry` seconds ago (and not before `since`), to make the
 * renewal payment of the current period: it is not asked again yet, and the period lapses on time as
 * one left unpaid. Taken as an outage, it was asked at every sweep and the subscription stayed active
 * past its end until the dunning window was over (found from outside: a card renewal under Stripe's
 * minimum after the rate moved).
 */
const refusalHolds = (s: ScheduleView, now: number, since = 0, retry = REFUSED_RETRY_S) => refusedSince(s, since) && now < (s.renewal_refused_at ?? 0) + retry;

/** The renewal payment of the current period was refused (not before `since`), and none was made since. */
const refusedSince = (s: ScheduleView, since = 0) =>
  s.renewal_refused_for === s.current_period_end && s.renewal_refused_at !== null && s.renewal_refused_at >= since;

/**
 * Nothing payable for the renewal because the payments service refused to make it: no open invoice of
 * the period (a refusal left behind by a replica that made one since and could not clear it says nothing).
 */
export const noRenewalInvoice = (s: ScheduleView, now: number): boolean =>
  s.status === 'pending'
    ? // A resume's payment: refused since the resume (one before the pause no longer holds), none made since.
      s.renewal_payment_id === null && refusedSince(s, s.pending_since ?? 0)
    : refusedSince(s) && !(s.renewal_for === s.current_period_end && s.renewal_expires_at !== null && s.renewal_expires_at > now);

export function dueNow(s: ScheduleView, now: number, p: SchedulePolicy): Due {
  if (s.status === 'pending') {
    const resumed = pendingSinceResume(s);
    if (now < (s.pending_since ?? 0) + PENDING_EXPIRY_SECONDS) {
      if (!resumed) return NONE;
      // Its payment not made, or its wallet asked by a resume that stopped before the answer (no reminder yet).
      const unmade =
        s.renewal_payment_id === null &&
        now >= (s.pending_since ?? 0) + RESUME_PAYMENT_AFTER_S &&
        !refusalHolds(s, now, s.pending_since ?? 0, RESUME_REFUSED_RETRY_S);
      const unanswered = s.renewal_payment_id !== null && s.nwc_charging_since !== null && now >= s.nwc_charging_since + NWC_CHARGE_WINDOW_S;
      return unmade || unanswered ? { kind: 'resume_payment' } : NONE;
    }
    // A resumed subscriber hears of the end (and, when its payment could never be made, why).
    return resumed
      ? {
          kind: 'lapse',
          event: 'pending_timeout',
          notify_subscriber: true,
          reason: EXPIRED_BECAUSE.resumeUnpaid,
          ...(noRenewalInvoice(s, now) ? { renewal_refused: true as const } : {}),
        }
      : { kind: 'lapse', event: 'pending_timeout', notify_subscriber: false, reason: EXPIRED_BECAUSE.checkoutUnpaid };
  }
  if (s.status !== 'active' && s.status !== 'past_due' && s.status !== 'payment_failed') return NONE;
  const end = s.current_period_end;
  // The calendar's last period (see hasNextPeriod): no renewal, reminder or wallet charge for a period
  // that cannot be whole; it runs to its end, and past LATEST_TIME there are no dates this service keeps.
  // A past_due one an extend moved into it too, as an active one (renewalOverdue).
  if ((s.status === 'active' || s.status === 'past_due') && !hasNextPeriod(end, s.interval)) return NONE;
  const issued = s.renewal_for === end;
  const refused = refusalHolds(s, now);
  const noInvoice = noRenewalInvoice(s, now);
  // The wallet was asked for this period (its charge saves the renewal before it asks); one whose invoice
  // was refused never was, and is not said to have failed.
  const walletAsked = autoPays(s) && issued;
  // A step of dunning, payable until `payBy`; without a window left (no grace and no dunning days) the
  // expiry follows at once and says it all.
  const dunningStep = (event: 'period_end_unpaid' | 'grace_end_unpaid', payBy: number): Due => ({
    kind: 'lapse',
    event,
    notify_subscriber: s.receive_reminders && payBy > now,
    pay_by: payBy,
    ...(event === 'period_end_unpaid' && walletAsked && now < graceEnd(s) ? { wallet_retries: true as const } : {}),
    ...(walletAsked ? { wallet_failed: true as const } : {}),
    ...(s.trial_end === end ? { after_trial: true as const } : {}),
    ...(noInvoice ? { renewal_refused: true as const } : !issued ? { invoice_to_follow: true as const } : {}),
  });
  // The dunning step due now, if any. With grace the subscription goes past_due (access kept until the grace
  // ends), else payment_failed. It comes after a wallet charge, but before an invoice made or replaced
  // (below).
  const lapse: Due | null =
    s.status === 'active' && now >= end
      ? dunningStep('period_end_unpaid', s.grace_period_days > 0 ? graceEnd(s) : dunningEndAt(s, now, p))
      : s.status === 'past_due' && now >= graceEnd(s)
        ? dunningStep('grace_end_unpaid', dunningEndAt(s, now, p))
        : s.status === 'payment_failed' && now >= dunningEnd(s, p)
          ? {
              kind: 'lapse',
              event: 'dunning_end_unpaid',
              notify_subscriber: true,
              reason: EXPIRED_BECAUSE.dunningOver,
              ...(noInvoice ? { renewal_refused: true as const } : {}),
            }
          : null;
  // Once the wallet's retries are over (payment_failed) the subscriber pays by invoice, like everyone else.
  const walletPays = autoPays(s) && s.status !== 'payment_failed';
  if (walletPays) {
    const first = !issued && now >= end;
    // Not before the period ends: a past_due one extended waits for its new end, as an active one does.
    const retry = issued && s.nwc_next_attempt_at !== null && now >= s.nwc_next_attempt_at && now >= end && now < graceEnd(s);
    if ((first || retry) && !refused) return { kind: 'charge_wallet', first, retry_at: now + (first ? NWC_FIRST_RETRY_S : NWC_RETRY_S) };
    if (s.trial_end === end && s.reminded_for !== end && now < end && now >= end - REMINDER_BEFORE_END_SECONDS) return { kind: 'trial_ending' };
    // Paid by the wallet: the payment.received consumer renews it; the period must not lapse meanwhile.
    if (issued && s.nwc_next_attempt_at === null) return NONE;
    // Another replica is waiting for the wallet (a crashed one only holds this for NWC_CHARGE_WINDOW_S).
    if (issued && s.nwc_charging_since !== null && now - s.nwc_charging_since < NWC_CHARGE_WINDOW_S) return NONE;
  } else {
    // A lapse due now goes first: the invoice and its reminder then say the state and the period the
    // subscription is in by then (found from outside: one replaced as the grace ended said past_due and
    // the old period, the payment_failed after it in the same sweep a new period from the payment; the
    // first one made as the scheduler came back days after the end said "if paid by" a date gone by).
    // Not after a refusal: asked again first, the lapse's notice then says whether there is an invoice.
    // Also when the clock is already past the end: the subscriber still needs something to pay, until the
    // dunning window is over too (then nothing is payable any more, and the steps below lapse it).
    const lead = RENEWAL_LEAD_SECONDS[s.interval];
    const firstDue = (lapse === null || refusedSince(s)) && !issued && !refused && now >= end - lead && now < dunningEnd(s, p);
    // An invoice has a bounded life; while the subscription can still be renewed, it gets a new one. One
    // carried by an extend to a later end (carryOpenRenewal) while the renewal is not overdue waits for the
    // new lead time rather than being replaced daily until then.
    const replace =
      lapse === null &&
      issued &&
      !refused &&
      s.renewal_expires_at !== null &&
      now >= s.renewal_expires_at &&
      (renewalOverdue(s, now) || now >= end - lead) &&
      now < dunningEnd(s, p);
    if (firstDue || replace) {
      const previous = replace ? s.renewal_payment_id : null;
      // A last call is made before the end: an invoice replaced after it is a dunning one (found from
      // outside: "Payment due" a millisecond after "Payment failed", with the same words, after a jump).
      const lastCall = now >= end - REMINDER_BEFORE_END_SECONDS && now < end;
      // The subscriber hears of the first invoice and of the last call; of replacements (an invoice lives a
      // day, a grace period can last months) at most weekly. The owner's events carry every one.
      const notify =
        s.receive_reminders && (!previous || (lastCall && s.reminded_for !== end) || now - (s.reminder_notified_at ?? 0) >= NOTIFY_REPLACEMENT_EVERY_S);
      // A trial that ended before its first invoice could be made (the scheduler was away: the lapse went
      // first; or asked again after a refusal) is not "ending".
      const trialEnding = !previous && s.trial_end === end && s.status === 'active' && now < end;
      return { kind: 'renewal_payment', replaces: previous, last_call: lastCall, notify_subscriber: notify, trial_ending: trialEnding };
    }
  }
  if (lapse !== null) return lapse;
  // A wallet that still pays is asked at the end: no invoice to call for (a carried one has expired).
  // Not with an invoice that expired (its replacement refused): the reminder would send a dead invoice. One
  // payable beside a refusal left behind is called for.
  const payable = !(s.renewal_expires_at !== null && s.renewal_expires_at <= now);
  if (!walletPays && payable && now < end && issued && s.reminded_for !== end && now >= end - REMINDER_BEFORE_END_SECONDS)
    return { kind: 'last_call', notify_subscriber: s.receive_reminders };
  return NONE;
}

/**
 * The earliest time from `now` on at which something is due for `s` as it stands (null: never, until it
 * changes). `dueNow` only changes its answer at these instants, so trying each in order finds the first;
 * the scheduler loads rows by this time and never restates the rules in SQL.
 */
export function nextDueAt(s: ScheduleView, now: number, p: SchedulePolicy): number | null {
  if (dueNow(s, now, p).kind !== 'none') return now;
  const end = s.current_period_end;
  const candidates = [
    (s.pending_since ?? 0) + PENDING_EXPIRY_SECONDS,
    (s.pending_since ?? 0) + RESUME_PAYMENT_AFTER_S,
    end - RENEWAL_LEAD_SECONDS[s.interval],
    end - REMINDER_BEFORE_END_SECONDS,
    end,
    graceEnd(s),
    dunningEnd(s, p),
    s.renewal_expires_at,
    s.nwc_next_attempt_at,
    s.nwc_charging_since === null ? null : s.nwc_charging_since + NWC_CHARGE_WINDOW_S,
    s.renewal_refused_at === null ? null : s.renewal_refused_at + REFUSED_RETRY_S,
    s.renewal_refused_at === null ? null : s.renewal_refused_at + RESUME_REFUSED_RETRY_S,
  ]
    .filter((t): t is number => t !== null && t > now)
    .sort((a, b) => a - b);
  return candidates.find((t) => dueNow(s, t, p).kind !== 'none') ?? null;
}

/**
 * An extend moves the period end, and the renewal payment issued for the period moves along with it: it
 * stays the one payable renewal (the subscriber may be paying it right now, and it pays the period after
 * the new end), replaced when it expires as any is. Left behind, a second one was issued at the new lead
 * time while the first was still payable, and both could be paid. A payment_failed subscription so keeps
 * a payable one (behaviour.md); one whose renewal is not overdue (active, past_due extended past now) is
 * not replaced before the new lead time (see dueNow, renewalOverdue).
 */
export function carryOpenRenewal(s: Pick<ScheduleView, 'renewal_for' | 'current_period_end'>, days: number): Partial<ScheduleView> {
  if (s.renewal_for === null || s.renewal_for !== s.current_period_end) return {};
  return { renewal_for: s.renewal_for + days * DAY_SECONDS };
}

/**
 * A wallet connected again after the subscription fell back to invoices: renewals go to the wallet again,
 * and a renewal already issued for the period is charged to it at the period end (at once when that has
 * passed), as a retry is. Left without an attempt time it would read as "paid by the wallet, waiting for
 * the payment" and nothing would ever be due again: access without payment, for good. A charge under
 * way keeps its marker (nwc_charging_since): a resume's charge owes its reminder until it ends, and a due
 * retry is not held by it.
 */
export function walletReconnected(s: Pick<ScheduleView, 'renewal_for' | 'current_period_end'>, now: number): Partial<ScheduleView> {
  const issued = s.renewal_for !== null && s.renewal_for === s.current_period_end;
  return { nwc_fallback: false, ...(issued ? { nwc_next_attempt_at: Math.max(now, s.current_period_end) } : {}) };
}

/**
 * The wallet asked to pay the renewal is gone (deactivated by this failure, or disconnected): renewals go
 * out as invoices, and the open one reaches the subscriber in a reminder now. Sent from the period's end
 * on, that reminder is the period's last call: the replacements of its invoice then follow at most weekly.
 * Left unmarked, the next replacement (a day later) counted as the last call and was sent too.
 */
export function walletGone(
  s: Pick<ScheduleView, 'current_period_end' | 'receive_reminders' | 'reminded_for' | 'reminder_notified_at'>,
  now: number,
): Partial<ScheduleView> {
  const end = s.current_period_end;
  return {
    nwc_next_attempt_at: null,
    nwc_charging_since: null,
    nwc_fallback: true,
    reminded_for: now >= end - REMINDER_BEFORE_END_SECONDS ? end : s.reminded_for,
    reminder_notified_at: s.receive_reminders ? now : s.reminder_notified_at,
  };
}

/**
 * A pause withdraws the open renewal payment: it counts as expired from now, so a resume while the
 * subscription can still renew issues a new one at once, and the subscriber (whose invoice stopped
 * working) hears of it.
 */
export function withdrawOpenRenewal(s: Pick<ScheduleView, 'renewal_for' | 'current_period_end' | 'renewal_expires_at'>, now: number): Partial<ScheduleView> {
  if (s.renewal_for !== s.current_period_end) return {};
  return { renewal_expires_at: Math.min(s.renewal_expires_at ?? now, now), reminder_notified_at: null };
}

/**
 * A renewal payment a sweep made (for the period ending at `end`, replacing `replaces`) that it could not
 * link: the subscription moved between the sweep's read and its save (a pause, a resume, a payment, an
 * extend, a cancel). `keep`: the subscription still wants a renewal under the same idempotency key (an
 * owner's edit, say), so the next pass links this one. Otherwise nobody was sent it and it must stop
 * being payable (`withdraw`); a paused subscription in the same period records it as the withdrawn
 * renewal, as if the pause had come after it, so that a resume issues a replacement instead of getting
 * this withdrawn payment back by its key.
 */
export function lostRenewal(
  cur: Pick<ScheduleView, 'status' | 'current_period_end' | 'renewal_for' | 'renewal_payment_id'> | undefined,
  lost: { end: number; replaces: string | null; payment_id: string },
  now: number,
): { kind: 'keep' } | { kind: 'withdraw'; link: Partial<ScheduleView> | null } {
  if (!cur) return { kind: 'withdraw', link: null };
  // Linked by another replica's save of the same key.
  if (cur.renewal_payment_id === lost.payment_id) return { kind: 'keep' };
  const sameKey = cur.current_period_end === lost.end && (cur.renewal_for === lost.end ? cur.renewal_payment_id : null) === lost.replaces;
  if (sameKey && (cur.status === 'active' || cur.status === 'past_due' || cur.status === 'payment_failed')) return { kind: 'keep' };
  if (sameKey && cur.status === 'paused') {
    const withdrawn = withdrawOpenRenewal({ renewal_for: lost.end, current_period_end: lost.end, renewal_expires_at: null }, now);
    return { kind: 'withdraw', link: { renewal_payment_id: lost.payment_id, renewal_for: lost.end, ...withdrawn } };
  }
  return { kind: 'withdraw', link: null };
}

/**
 * The provider ended the open renewal payment before its time (its session expired, the payer's card or
 * PayPal was declined): it counts as expired from now, so the next scheduler pass issues its replacement
 * (behaviour.md: renewal payments stay payable, a new invoice whenever one expires). Null when `paymentId`
 * is not the period's open renewal (an older invoice, a checkout, one already replaced or withdrawn), so
 * a repeated notice changes nothing.
 */
export function renewalEndedEarly(
  s: Pick<ScheduleView, 'renewal_for' | 'current_period_end' | 'renewal_payment_id' | 'renewal_expires_at'>,
  paymentId: string,
  now: number,
): Partial<ScheduleView> | null {
  if (s.renewal_payment_id !== paymentId || s.renewal_for !== s.current_period_end) return null;
  if (s.renewal_expires_at !== null && s.renewal_expires_at <= now) return null;
  return { renewal_expires_at: now };
}

/**
 * The payments service refused to make the renewal payment of the current period (a DomainError of kind
 * `invalid`: the request can never succeed as it stands). Recorded so that the lapse follows on time and
 * the ask is made again a day later (dueNow); a renewal payment made since clears it (`renewalMade`).
 */
export function renewalRefused(s: Pick<ScheduleView, 'current_period_end'>, now: number, reason: string): Partial<ScheduleView> {
  return { renewal_refused_for: s.current_period_end, renewal_refused_at: now, renewal_refused_reason: reason };
}

/** A renewal payment of the period was made after all: a refusal before it no longer holds. */
export const renewalMade: Partial<ScheduleView> = { renewal_refused_for: null, renewal_refused_at: null, renewal_refused_reason: null };

/**
 * Resumed after the period ended (pending, behaviour.md): the renewal payment the pause withdrew is let
 * go, so that one missing is the resume's own payment not made yet, and the scheduler makes it
 * (`resume_payment`) if the resume could not. Resumed within the period: nothing changes here.
 */
export function resumeBookkeeping(s: Pick<ScheduleView, 'current_period_end'>, now: number): Partial<ScheduleView> {
  return now >= s.current_period_end ? { renewal_payment_id: null } : {};
}

/**
 * An NWC charge answered by a preimage the payments service could not check yet (it was away): held as a
 * charge under way, so the period does not lapse on it, and charged again after the charge window, which
 * takes the checked answer (a refused preimage paid nothing, and the wallet is asked again).
 */
export const uncheckedRecheckAt = (now: number) => now + NWC_CHARGE_WINDOW_S;

/**
 * The charge marker an NWC renewal charge the wallet did not pay leaves: none, so the period may lapse now
 * (past_due, payment_failed), unless the wallet may still pay (no answer in time): then the charge stays
 * under way for the charge window from its answer, and a payment moments later renews the subscription
 * with no dunning notice before it (found from outside: "your connected wallet could not pay it", then a
 * receipt seconds later).
 */
export const unpaidChargeMarker = (mayStillPay: boolean, answeredAt: number): { nwc_charging_since: number | null } => ({
  nwc_charging_since: mayStillPay ? answeredAt : null,
});
