import type { CreatedPayment, EventEnvelope } from '@sb/contracts';
import { conflict, enqueueEvent, enqueueEvents, type Queryable } from '@sb/runtime';
import { SCHEMA, type Deps } from './deps.js';
import { cancelledFacts, inTrial, renewalTerms, transition, type LifecycleEvent, type SubState } from './domain/lifecycle.js';
import { renewableUntil, type SchedulePolicy } from './domain/schedule.js';
import type { SubRow } from './store/subscriptions.repo.js';

export type EventNames = { plan_name: string; email: string | null; name: string | null } | undefined;

/** The WebhookEvent data of a subscription: what an owner's webhook needs without a second call. */
function subscriptionEventData(s: SubRow, r: EventNames, extra: Record<string, unknown>): EventEnvelope['data'] {
  return {
    subscription_id: s.id,
    plan_id: s.plan_id,
    plan_name: r?.plan_name ?? '',
    ...(r?.email ? { subscriber_email: r.email } : {}),
    ...(r?.name ? { subscriber_name: r.name } : {}),
    status: s.status,
    amount_sats: s.amount_sats,
    // What notices say the amount is for ("5,000 sats per month").
    interval: s.interval,
    // What notices say: the period a payment covers, until when a cancelled subscription keeps access, who cancelled.
    current_period_start: s.current_period_start,
    current_period_end: s.current_period_end,
    ...(s.cancel_reason ? { cancel_reason: s.cancel_reason } : {}),
    // Who cancelled, for notices to word: never guessed from the reason, an owner's free text.
    ...(s.cancelled_by ? { cancelled_by: s.cancelled_by } : {}),
    ...extra,
  };
}

/** `names`: the plan's and subscriber's, when the caller has just read or written them (a statement less). */
export async function emit(
  d: Deps,
  q: Queryable,
  s: SubRow,
  event: EventEnvelope['event'],
  extra: Record<string, unknown> = {},
  names?: EventNames,
): Promise<void> {
  names ??= await d.subscriptions.eventNames(q, s.plan_id, s.subscriber_id);
  await enqueueEvent(q, SCHEMA, d.clock, s.wallet_id, event, subscriptionEventData(s, names, extra));
}

/** A renewal.reminder's data: whatever the method, what pays it (invoice, address and BIP21, or processor link). */
export function reminderData({ payment, checkout }: CreatedPayment, dueAt: number, notify: boolean): Record<string, unknown> {
  return {
    payment_id: payment.id,
    due_at: dueAt,
    payment_method: payment.payment_method,
    payment_request: checkout.payment_request ?? null,
    onchain_address: checkout.onchain_address ?? null,
    bip21_uri: checkout.bip21_uri ?? null,
    checkout_url: checkout.checkout_url ?? null,
    amount_fiat: payment.amount_fiat ?? null,
    currency: payment.currency ?? null,
    expires_at: checkout.expires_at,
    notify_subscriber: notify,
  };
}

/** What a card or wallet-processor payment charges in fiat, for notices to say beside the sats (nothing for bitcoin). */
export const fiatCharged = (p: { amount_fiat?: number | null; currency?: string | null } | null | undefined): Record<string, unknown> =>
  typeof p?.amount_fiat === 'number' && p.currency ? { amount_fiat: p.amount_fiat, currency: p.currency } : {};

/** The period a renewal paid at `at` covers, and on what terms, as reminders and dunning notices say it (domain/lifecycle.ts). */
export function renewalPeriodData(s: SubState, at: number, policy: SchedulePolicy): Record<string, unknown> {
  const p = renewalTerms(s, at, policy);
  if (!p) return {};
  return {
    renewal_period_start: p.start,
    renewal_period_end: p.end,
    ...(p.if_paid_by !== undefined ? { renewal_period_if_paid_by: p.if_paid_by } : {}),
    ...('from_payment' in p ? { renewal_period_from_payment: true } : {}),
  };
}

/**
 * A renewal.reminder's terms: the period it pays for and, once the period has ended unpaid (past_due,
 * payment_failed), until when it can still be paid at all (`pay_by`, the end of the dunning window). The
 * period end an extend moved is no date to pay by (the window stays), so a reminder cannot take it for one.
 */
export function reminderTerms(s: SubState, at: number, policy: SchedulePolicy): Record<string, unknown> {
  const payBy = renewableUntil(s, policy);
  return { ...renewalPeriodData(s, at, policy), ...(payBy !== null ? { pay_by: payBy } : {}) };
}

/**
 * A reminder for the last period of a free trial: it is also the trial's end notice, so the subscriber
 * gets one message at that moment (the `subscription.trial_ending` beside it is for owners).
 */
export const trialEndData = (s: Pick<SubState, 'status' | 'trial_end' | 'current_period_end'>, now: number): Record<string, unknown> =>
  inTrial(s, now) ? { trial_end: s.trial_end } : {};

/** `emit` of many events (a sweep's batch) in two statements; the outbox keeps their order. */
export async function emitMany(d: Deps, q: Queryable, events: { s: SubRow; event: EventEnvelope['event']; extra?: Record<string, unknown> }[]): Promise<void> {
  if (!events.length) return;
  const names = await d.subscriptions.eventNamesOf(
    q,
    events.map((e) => e.s),
  );
  await enqueueEvents(
    q,
    SCHEMA,
    d.clock,
    events.map((e) => ({
      walletId: e.s.wallet_id,
      event: e.event,
      data: subscriptionEventData(e.s, names.get(`${e.s.plan_id}/${e.s.subscriber_id}`), e.extra ?? {}),
    })),
  );
}

/**
 * Settings only (metadata, notice opt-ins), from the owner, the portal or an unsubscribe link: no
 * lifecycle move, no event. The caller read the row locked in `q`'s transaction, as lifecycle moves do,
 * so a change beside them waits its turn instead of answering 409.
 */
export async function saveSettings(
  d: Deps,
  q: Queryable,
  sub: SubRow,
  changes: Partial<Pick<SubRow, 'metadata' | 'receive_reminders' | 'receive_confirmations'>>,
  now: number,
): Promise<SubRow> {
  const next = { ...sub, ...changes, updated_at: now };
  if (!(await d.subscriptions.save(q, next))) throw conflict('Subscription was changed concurrently; retry');
  return next;
}

/**
 * One lifecycle move: the pure transition, one compare-and-set on the row, and its event in the outbox,
 * all inside the caller's transaction. A lost race is 409 and changes nothing.
 */
export async function applyTransition(
  d: Deps,
  q: Queryable,
  sub: SubRow,
  e: LifecycleEvent,
  now: number,
  bookkeeping: Partial<SubRow> = {},
  /** The event's further data; a function of the saved row when it depends on where the move led. */
  extra: Record<string, unknown> | ((saved: SubRow) => Record<string, unknown>) = {},
): Promise<SubRow> {
  const { next, event } = transition(sub, e, now);
  const row: SubRow = { ...sub, ...next, ...bookkeeping, updated_at: now };
  if (!(await d.subscriptions.save(q, row))) throw conflict('Subscription was changed concurrently; retry');
  const saved = { ...row, version: sub.version + 1 };
  // What it was before: a notice about a checkout never paid (or a trial cancelled) is not one about a paid subscription.
  await emit(d, q, saved, event, {
    previous_status: sub.status,
    ...(event === 'subscription.cancelled' ? cancelledFacts(sub, now) : {}),
    ...(typeof extra === 'function' ? extra(saved) : extra),
  });
  return saved;
}
