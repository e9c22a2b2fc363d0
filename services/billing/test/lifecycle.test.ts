import { describe, expect, it } from 'vitest';
import type { SubscriptionStatus } from '@sb/contracts';
import { DomainError } from '@sb/runtime';
import {
  accessAfterCancel,
  accessUntil,
  cancelledFacts,
  channelsReaching,
  hasAccess,
  reasonForSubscriber,
  renewalTerms,
  startSubscription,
  transition,
  type LifecycleEvent,
  type SubState,
  whoCancelled,
} from '../src/domain/lifecycle.js';
import { LATEST_TIME, periodEnd } from '../src/domain/periods.js';

const DAY = 86_400;
const T0 = Date.parse('2027-01-31T00:00:00Z') / 1000;

function sub(status: SubscriptionStatus, over: Partial<SubState> = {}): SubState {
  return {
    status,
    interval: 'monthly',
    grace_period_days: 3,
    period_anchor: T0,
    anchor_index: 0,
    period_index: 1,
    current_period_start: T0,
    current_period_end: periodEnd(T0, 1, 'monthly'),
    trial_end: null,
    cancelled_at: null,
    cancel_reason: null,
    cancelled_by: null,
    cancelled_immediately: false,
    paused_at: null,
    stopped_at_ms: null,
    pending_since: null,
    dunning_from: null,
    ...over,
  };
}

const EVENTS: Record<string, LifecycleEvent> = {
  first_payment: { type: 'first_payment', paid_at: T0 + 100 },
  renewal_payment: { type: 'renewal_payment', paid_at: T0 + 100 },
  pending_timeout: { type: 'pending_timeout' },
  checkout_failed: { type: 'checkout_failed' },
  period_end_unpaid: { type: 'period_end_unpaid' },
  grace_end_unpaid: { type: 'grace_end_unpaid' },
  dunning_end_unpaid: { type: 'dunning_end_unpaid' },
  pause: { type: 'pause' },
  resume: { type: 'resume' },
  cancel: { type: 'cancel', by: 'merchant', immediate: false },
  plan_archived: { type: 'plan_archived' },
  extend: { type: 'extend', days: 5 },
};

/** Written independently of the table: which status each event leads to from each status ('-' = 409). */
const EXPECTED: Record<SubscriptionStatus, Record<keyof typeof EVENTS, SubscriptionStatus | '-'>> = {
  pending: {
    first_payment: 'active',
    renewal_payment: 'active',
    checkout_failed: 'expired',
    pending_timeout: 'expired',
    period_end_unpaid: '-',
    grace_end_unpaid: '-',
    dunning_end_unpaid: '-',
    pause: '-',
    resume: '-',
    cancel: 'cancelled',
    plan_archived: 'cancelled',
    extend: 'pending',
  },
  active: {
    first_payment: '-',
    renewal_payment: 'active',
    checkout_failed: '-',
    pending_timeout: '-',
    period_end_unpaid: 'past_due',
    grace_end_unpaid: '-',
    dunning_end_unpaid: '-',
    pause: 'paused',
    resume: '-',
    cancel: 'cancelled',
    plan_archived: 'cancelled',
    extend: 'active',
  },
  paused: {
    first_payment: '-',
    renewal_payment: '-',
    checkout_failed: '-',
    pending_timeout: '-',
    period_end_unpaid: '-',
    grace_end_unpaid: '-',
    dunning_end_unpaid: '-',
    pause: '-',
    resume: 'active',
    cancel: 'cancelled',
    plan_archived: 'cancelled',
    extend: 'paused',
  },
  past_due: {
    first_payment: '-',
    renewal_payment: 'active',
    checkout_failed: '-',
    pending_timeout: '-',
    period_end_unpaid: '-',
    grace_end_unpaid: 'payment_failed',
    dunning_end_unpaid: '-',
    pause: 'paused',
    resume: '-',
    cancel: 'cancelled',
    plan_archived: 'cancelled',
    extend: 'past_due',
  },
  payment_failed: {
    first_payment: '-',
    renewal_payment: 'active',
    checkout_failed: '-',
    pending_timeout: '-',
    period_end_unpaid: '-',
    grace_end_unpaid: '-',
    dunning_end_unpaid: 'expired',
    pause: '-',
    resume: '-',
    cancel: 'cancelled',
    plan_archived: 'cancelled',
    extend: 'payment_failed',
  },
  cancelled: {
    first_payment: '-',
    renewal_payment: '-',
    checkout_failed: '-',
    pending_timeout: '-',
    period_end_unpaid: '-',
    grace_end_unpaid: '-',
    dunning_end_unpaid: '-',
    pause: '-',
    resume: '-',
    cancel: '-',
    plan_archived: '-',
    extend: 'cancelled',
  },
  expired: {
    first_payment: 'active',
    renewal_payment: 'active',
    checkout_failed: '-',
    pending_timeout: '-',
    period_end_unpaid: '-',
    grace_end_unpaid: '-',
    dunning_end_unpaid: '-',
    pause: '-',
    resume: '-',
    cancel: '-',
    plan_archived: '-',
    extend: 'expired',
  },
};

describe('channels reaching a subscriber', () => {
  it("keeps the seller's channels the subscriber gave a contact for, in the seller's order", () => {
    expect(channelsReaching(['messenger'], { email: 'a@example.com', messenger: null, nostr: null })).toEqual([]);
    expect(channelsReaching(['email', 'messenger', 'nostr'], { email: 'a@example.com', nostr: 'npub1x' })).toEqual(['email', 'nostr']);
    expect(channelsReaching(['nostr', 'email'], { email: 'a@example.com', messenger: '@a', nostr: 'npub1x' })).toEqual(['nostr', 'email']);
    expect(channelsReaching([], { email: 'a@example.com' })).toEqual([]);
  });
});

describe('lifecycle table', () => {
  for (const [status, row] of Object.entries(EXPECTED) as [SubscriptionStatus, Record<string, string>][]) {
    for (const [event, to] of Object.entries(row)) {
      it(`${status} --${event}--> ${to === '-' ? '409' : to}`, () => {
        const s = sub(status);
        const now = T0 + 10 * DAY;
        if (to === '-') {
          let err: unknown;
          try {
            transition(s, EVENTS[event]!, now);
          } catch (e) {
            err = e;
          }
          expect(err).toBeInstanceOf(DomainError);
          expect((err as DomainError).kind).toBe('conflict');
        } else {
          expect(transition(s, EVENTS[event]!, now).next.status).toBe(to);
        }
      });
    }
  }
});

describe('lifecycle details', () => {
  const now = T0 + 10 * DAY;

  it('subscribe: a trial plan starts active until trial_end; a paid plan starts pending', () => {
    const trial = startSubscription({ interval: 'monthly', trial_days: 14, grace_period_days: 0 }, T0);
    expect(trial).toMatchObject({
      status: 'active',
      trial_end: T0 + 14 * DAY,
      current_period_end: T0 + 14 * DAY,
      period_anchor: T0 + 14 * DAY,
      period_index: 0,
    });
    expect(startSubscription({ interval: 'weekly', trial_days: 0, grace_period_days: 0 }, T0).status).toBe('pending');
  });

  it('first payment starts the period at paid_at', () => {
    // A checkout: no period yet (it starts and ends at the checkout's creation).
    const checkout = sub('pending', { period_index: 0, current_period_end: T0, pending_since: T0 });
    const t = transition(checkout, { type: 'first_payment', paid_at: T0 + 50 }, now);
    expect(t.event).toBe('subscription.activated');
    expect(t.next).toMatchObject({ current_period_start: T0 + 50, current_period_end: periodEnd(T0 + 50, 1, 'monthly'), period_anchor: T0 + 50 });
  });

  it('an extend past 9999-12-31 is 422 on days, naming how many days are left (found from outside: the portal could not write the date)', () => {
    const late = sub('active', { current_period_end: LATEST_TIME - 10 * DAY });
    expect(transition(late, { type: 'extend', days: 10 }, now).next.current_period_end).toBe(LATEST_TIME);
    expect(() => transition(late, { type: 'extend', days: 11 }, now)).toThrow(DomainError);
    expect(() => transition(late, { type: 'extend', days: 11 }, now)).toThrow(
      expect.objectContaining({
        kind: 'invalid',
        issues: [{ in: 'query', field: ['days'], msg: 'The period would end after 9999-12-31; at most 10 more days can be added', type: 'value_error' }],
      }),
    );
  });

  it('no path moves a period end past 9999-12-31: a renewal, a first payment or a trial that would end later ends there (found from outside)', () => {
    // Extended to late 9999, then its renewal (issued before the extend) paid: the rest of 9999, not year 10000.
    const late = transition(sub('active', { current_period_end: LATEST_TIME - 20 * DAY }), { type: 'extend', days: 10 }, now).next;
    const renewed = transition(late, EVENTS.renewal_payment!, now).next;
    expect(renewed).toMatchObject({ status: 'active', current_period_start: LATEST_TIME - 10 * DAY, current_period_end: LATEST_TIME });
    // A checkout extended there, then paid; a payment after payment_failed keeping days that reach there.
    const checkout = sub('pending', { period_index: 0, current_period_start: T0, current_period_end: LATEST_TIME - 5 * DAY, pending_since: T0 });
    expect(transition(checkout, { type: 'first_payment', paid_at: T0 + 50 }, now).next.current_period_end).toBe(LATEST_TIME);
    const failed = sub('payment_failed', { current_period_end: LATEST_TIME - 5 * DAY });
    expect(transition(failed, { type: 'renewal_payment', paid_at: now }, now).next.current_period_end).toBe(LATEST_TIME);
    // Resumed after the period ended (pending), then paid: the same rule.
    const resumed = transition(sub('paused', { current_period_end: LATEST_TIME - 40 * DAY }), { type: 'resume' }, LATEST_TIME - 20 * DAY).next;
    expect(resumed.status).toBe('pending');
    expect(transition(resumed, { type: 'renewal_payment', paid_at: LATEST_TIME - 20 * DAY }, now).next.current_period_end).toBe(LATEST_TIME);
    expect(startSubscription({ interval: 'monthly', trial_days: 30, grace_period_days: 0 }, LATEST_TIME - DAY)).toMatchObject({
      trial_end: LATEST_TIME,
      current_period_end: LATEST_TIME,
    });
    // Inside the calendar nothing changes.
    expect(periodEnd(LATEST_TIME - 40 * DAY, 1, 'monthly')).toBeLessThan(LATEST_TIME);
  });

  it('days an extend added before a new period starts are kept on it (pending checkout, payment_failed)', () => {
    const checkout = sub('pending', { period_index: 0, current_period_end: T0, pending_since: T0 });
    const extended = transition(checkout, { type: 'extend', days: 10 }, now).next;
    const paid = transition(extended, { type: 'first_payment', paid_at: T0 + 50 }, now).next;
    // The days come after the paid month, as an extend after the payment adds them; later periods follow
    // from there, as after any extend.
    const end = periodEnd(T0 + 50, 1, 'monthly') + 10 * DAY;
    expect(paid).toMatchObject({ current_period_start: T0 + 50, current_period_end: end, period_anchor: end, anchor_index: 1, period_index: 1 });
    expect(transition(paid, { type: 'renewal_payment', paid_at: end - DAY }, now).next.current_period_end).toBe(periodEnd(end, 1, 'monthly'));
    // A payment older than the checkout it activates (a late one, applied to the contact's newer checkout) grants nothing.
    const newer = sub('pending', { period_index: 0, current_period_start: T0 + 100, current_period_end: T0 + 100, pending_since: T0 + 100 });
    expect(transition(newer, { type: 'first_payment', paid_at: T0 }, now).next).toMatchObject({
      period_anchor: T0,
      current_period_end: periodEnd(T0, 1, 'monthly'),
    });

    const failed = transition(sub('payment_failed'), { type: 'extend', days: 30 }, now).next;
    const at = T0 + 40 * DAY;
    const revived = transition(failed, { type: 'renewal_payment', paid_at: at }, now).next;
    const granted = failed.current_period_end - at;
    expect(granted).toBeGreaterThan(0);
    expect(revived).toMatchObject({ current_period_start: at, period_anchor: at + granted, current_period_end: periodEnd(at + granted, 1, 'monthly') });
  });

  it('payment_failed extended: the end a dunning notice promises "if paid by" holds across months of other lengths (found in review)', () => {
    const jan15 = Date.parse('2027-01-15T00:00:00Z') / 1000;
    const failed = sub('payment_failed', {
      grace_period_days: 0,
      period_anchor: jan15 - 31 * DAY,
      current_period_start: jan15 - 31 * DAY,
      current_period_end: jan15,
    });
    const at = jan15 + DAY;
    const extended = transition(failed, { type: 'extend', days: 40 }, at).next;
    const terms = renewalTerms(extended, at, { dunning_days: 60 })!;
    const paidAt = Date.parse('2027-02-10T00:00:00Z') / 1000;
    expect(paidAt).toBeLessThan((terms as { if_paid_by: number }).if_paid_by);
    expect(transition(extended, { type: 'renewal_payment', paid_at: paidAt }, paidAt).next.current_period_end).toBe(terms.end);
  });

  it('a checkout extended, then paid or extended after the payment: the same days, whatever the months (found from outside: 61 against 58)', () => {
    const feb6 = Date.parse('2027-02-06T00:00:00Z') / 1000;
    const checkout = sub('pending', { period_index: 0, period_anchor: feb6, current_period_start: feb6, current_period_end: feb6, pending_since: feb6 });
    let before = checkout;
    for (let i = 0; i < 3; i++) before = transition(before, { type: 'extend', days: 10 }, feb6).next;
    const extendedFirst = transition(before, { type: 'first_payment', paid_at: feb6 }, feb6).next;
    let paidFirst = transition(checkout, { type: 'first_payment', paid_at: feb6 }, feb6).next;
    for (let i = 0; i < 3; i++) paidFirst = transition(paidFirst, { type: 'extend', days: 10 }, feb6).next;
    expect(extendedFirst.current_period_end).toBe(Date.parse('2027-04-05T00:00:00Z') / 1000);
    expect(paidFirst.current_period_end).toBe(extendedFirst.current_period_end);
    // The periods after it agree too.
    const renew = (x: SubState) => transition(x, { type: 'renewal_payment', paid_at: feb6 + DAY }, feb6 + DAY).next.current_period_end;
    expect(renew(extendedFirst)).toBe(renew(paidFirst));
  });

  it('days granted to a checkout survive its cancel and a later extend, for a payment made before the cancel (found from outside: 20 of 30 days lost)', () => {
    const feb6 = Date.parse('2027-02-06T00:00:00Z') / 1000;
    let s = sub('pending', { period_index: 0, period_anchor: feb6, current_period_start: feb6, current_period_end: feb6, pending_since: feb6 });
    for (let i = 0; i < 2; i++) s = transition(s, { type: 'extend', days: 10 }, feb6).next;
    s = transition(s, { type: 'cancel', immediate: false, by: 'subscriber' }, feb6 + 60).next;
    // A cancelled checkout gives no access: its end went back to its start, the days wait in the anchor.
    expect(s).toMatchObject({ status: 'cancelled', current_period_end: feb6 });
    s = transition(s, { type: 'extend', days: 10 }, feb6 + 70).next;
    // Still no access before a payment (found in review: the extend gave 10 days of it, never paid).
    expect(s.current_period_end).toBe(feb6);
    expect(hasAccess(s, feb6 + 80)).toBe(false);
    const paid = transition(s, { type: 'first_payment', paid_at: feb6 + 30 }, feb6 + 80).next;
    expect(paid).toMatchObject({ status: 'cancelled', current_period_start: feb6 + 30, current_period_end: periodEnd(feb6 + 30, 1, 'monthly') + 30 * DAY });
  });

  it('payment_failed extended keeps where its dunning window starts (the grace end that lapsed), across extends, until a payment', () => {
    const graceEnd = periodEnd(T0, 1, 'monthly') + 3 * DAY;
    const once = transition(sub('payment_failed'), { type: 'extend', days: 30 }, now).next;
    expect(once.dunning_from).toBe(graceEnd);
    const twice = transition(once, { type: 'extend', days: 60 }, now).next;
    expect(twice.dunning_from).toBe(graceEnd);
    expect(transition(twice, { type: 'renewal_payment', paid_at: graceEnd + DAY }, now).next.dunning_from).toBeNull();
    // Other states' extends move the grace along with the end: nothing kept.
    for (const status of ['active', 'past_due', 'paused'] as const)
      expect(transition(sub(status), { type: 'extend', days: 30 }, now).next.dunning_from).toBeNull();
  });

  it('a renewal continues from the old end, computed from the anchor (31 Jan -> 28 Feb -> 31 Mar)', () => {
    const t = transition(sub('active'), EVENTS.renewal_payment!, now);
    expect(t.event).toBe('subscription.renewed');
    expect(t.next.current_period_start).toBe(Date.parse('2027-02-28T00:00:00Z') / 1000);
    expect(t.next.current_period_end).toBe(Date.parse('2027-03-31T00:00:00Z') / 1000);
    const pastDue = transition(sub('past_due'), EVENTS.renewal_payment!, now).next;
    expect(pastDue.current_period_start).toBe(sub('past_due').current_period_end);
  });

  it('a payment after payment_failed starts a new period at paid_at', () => {
    const t = transition(sub('payment_failed'), { type: 'renewal_payment', paid_at: T0 + 40 * DAY }, now);
    expect(t.next).toMatchObject({ status: 'active', current_period_start: T0 + 40 * DAY, period_anchor: T0 + 40 * DAY });
  });

  it('period end unpaid: past_due with grace, payment_failed without', () => {
    expect(transition(sub('active', { grace_period_days: 2 }), EVENTS.period_end_unpaid!, now).event).toBe('subscription.past_due');
    const t = transition(sub('active', { grace_period_days: 0 }), EVENTS.period_end_unpaid!, now);
    expect(t).toMatchObject({ event: 'subscription.payment_failed', next: { status: 'payment_failed' } });
  });

  it('access lasts until the period end; while past_due until the grace ends; none without access', () => {
    const end = sub('active').current_period_end;
    expect(accessUntil(sub('active'), now)).toBe(end);
    expect(accessUntil(sub('past_due', { grace_period_days: 3 }), end + 60)).toBe(end + 3 * DAY);
    expect(accessUntil(sub('paused'), now)).toBe(end);
    expect(accessUntil(sub('payment_failed'), end + 60)).toBeNull();
    expect(accessUntil(sub('cancelled'), end)).toBeNull();
  });

  it('an extend re-anchors the periods at the new end: whole months from it (found from outside: 33-day months)', () => {
    const feb21 = Date.UTC(2027, 1, 21, 10) / 1000;
    const s = sub('active', { period_anchor: feb21, period_index: 1, current_period_start: feb21, current_period_end: periodEnd(feb21, 1, 'monthly') });
    const extended = transition(s, { type: 'extend', days: 15 }, feb21 + DAY).next;
    const apr5 = Date.UTC(2027, 3, 5, 10) / 1000;
    expect(extended.current_period_end).toBe(apr5);
    const renewed = transition(extended, { type: 'renewal_payment', paid_at: apr5 - DAY }, apr5 - DAY).next;
    expect(renewed).toMatchObject({ current_period_start: apr5, current_period_end: Date.UTC(2027, 4, 5, 10) / 1000 });
    const next = transition(renewed, { type: 'renewal_payment', paid_at: renewed.current_period_end }, renewed.current_period_end).next;
    expect(next.current_period_end).toBe(Date.UTC(2027, 5, 5, 10) / 1000);
    // The end of a long month is kept as the month allows: 31 Jan + 1 month ends on the last of February.
    const jan21 = Date.UTC(2027, 0, 21) / 1000;
    const long = transition(
      sub('past_due', { period_anchor: jan21 - 2 * 31 * DAY, period_index: 3, current_period_start: jan21 - 31 * DAY, current_period_end: jan21 }),
      { type: 'extend', days: 10 },
      jan21,
    ).next;
    const back = transition(long, { type: 'renewal_payment', paid_at: jan21 }, jan21).next;
    expect(back).toMatchObject({ current_period_start: jan21 + 10 * DAY, current_period_end: Date.UTC(2027, 1, 28) / 1000 });
    expect(transition(back, { type: 'renewal_payment', paid_at: back.current_period_end }, back.current_period_end).next.current_period_end).toBe(
      Date.UTC(2027, 2, 31) / 1000,
    );
  });

  it('resume: before the period end back to active, after it to pending', () => {
    const paused = sub('paused');
    expect(transition(paused, { type: 'resume' }, paused.current_period_end - 1).next.status).toBe('active');
    expect(transition(paused, { type: 'resume' }, paused.current_period_end).next.status).toBe('pending');
  });

  it('a checkout paid before its cancel, handled after: activated as in time, still cancelled; never after an immediate cancel', () => {
    const cancelledAt = T0 + 60;
    const checkout = (immediate: boolean) =>
      transition(
        startSubscription({ interval: 'monthly', trial_days: 0, grace_period_days: 0 }, T0),
        { type: 'cancel', by: 'merchant', immediate },
        cancelledAt,
      ).next;
    const paidAt = T0 + 30;
    const kept = transition(checkout(false), { type: 'first_payment', paid_at: paidAt }, cancelledAt + 5);
    expect(kept.event).toBe('subscription.activated');
    expect(kept.next).toMatchObject({ status: 'cancelled', cancelled_at: cancelledAt, period_index: 1, current_period_start: paidAt });
    expect(kept.next.current_period_end).toBe(periodEnd(paidAt, 1, 'monthly'));
    expect(hasAccess(kept.next, cancelledAt + 5)).toBe(true);
    // Its period would end at the cancel: the payment would buy nothing (payment-application.ts leaves it unapplied).
    expect(() => transition(checkout(true), { type: 'first_payment', paid_at: paidAt }, cancelledAt + 5)).toThrow(DomainError);
  });
  it('cancel keeps access to the period end; immediate ends it now', () => {
    const s = sub('active');
    const later = transition(s, { type: 'cancel', by: 'merchant', immediate: false, reason: 'too pricey' }, now).next;
    expect(later).toMatchObject({ status: 'cancelled', cancelled_at: now, cancel_reason: 'too pricey', current_period_end: s.current_period_end });
    expect(hasAccess(later, now)).toBe(true);
    expect(hasAccess(later, s.current_period_end)).toBe(false);
    const at = transition(s, { type: 'cancel', by: 'merchant', immediate: true }, now).next;
    expect(at.current_period_end).toBe(now);
    expect(hasAccess(at, now)).toBe(false);
    expect(at.trial_end).toBeNull();
    // A trial cancelled at once ended then too (found from outside: trial_end stayed days after the end).
    const trial = startSubscription({ interval: 'monthly', trial_days: 10, grace_period_days: 0 }, now - DAY);
    const ended = transition(trial, { type: 'cancel', by: 'merchant', immediate: true }, now).next;
    expect(ended).toMatchObject({ current_period_end: now, trial_end: now });
    expect(transition(trial, { type: 'cancel', by: 'merchant', immediate: false }, now).next.trial_end).toBe(trial.trial_end);
  });

  it('who cancelled comes from where the cancel came in, never from the reason an owner typed (found from outside)', () => {
    const s = sub('active');
    const byOwner = transition(s, { type: 'cancel', by: 'merchant', immediate: false, reason: 'cancelled by subscriber' }, now).next;
    expect(byOwner).toMatchObject({ cancelled_by: 'merchant', cancel_reason: 'cancelled by subscriber' });
    expect(reasonForSubscriber(byOwner)).toBe('cancelled by the merchant');
    const archiveNote = transition(s, { type: 'cancel', by: 'merchant', immediate: false, reason: 'plan archived' }, now).next;
    expect(reasonForSubscriber(archiveNote)).toBe('cancelled by the merchant');
    const bySubscriber = transition(s, { type: 'cancel', by: 'subscriber', immediate: false, reason: 'cancelled by subscriber' }, now).next;
    expect(reasonForSubscriber(bySubscriber)).toBe('cancelled by subscriber');
    const archived = transition(s, { type: 'plan_archived' }, now).next;
    expect([archived.cancelled_by, reasonForSubscriber(archived)]).toEqual(['plan_archived', 'plan archived']);
    // Cancelled before who cancelled was recorded: told from the reason as before.
    expect(reasonForSubscriber({ cancelled_by: null, cancel_reason: 'cancelled by subscriber' })).toBe('cancelled by subscriber');
    expect(reasonForSubscriber({ cancelled_by: null, cancel_reason: 'fraud' })).toBe('cancelled by the merchant');
    // The owner is told who, from the same record; an old cancel without a reason came from the API.
    expect(whoCancelled({ status: 'cancelled', cancelled_by: null, cancel_reason: 'plan archived' })).toBe('plan_archived');
    expect(whoCancelled({ status: 'cancelled', cancelled_by: null, cancel_reason: null })).toBe('merchant');
    expect(whoCancelled({ status: 'active', cancelled_by: null, cancel_reason: null })).toBeNull();
  });

  it('an immediate cancel after a renewal paid early ends a period that had not begun: it starts no later than it ends', () => {
    // Found from outside: the renewed period (starting at the old end) kept its start after the new end.
    const s = { ...sub('active'), current_period_start: now + 3 * DAY, current_period_end: now + 33 * DAY };
    const at = transition(s, { type: 'cancel', by: 'merchant', immediate: true }, now).next;
    expect(at).toMatchObject({ status: 'cancelled', current_period_start: now, current_period_end: now });
    expect(hasAccess(at, now)).toBe(false);
  });

  it('extend moves the period end, the anchor and a running trial', () => {
    const trial = startSubscription({ interval: 'monthly', trial_days: 7, grace_period_days: 0 }, T0);
    const t = transition(trial, { type: 'extend', days: 3 }, T0);
    expect(t.event).toBe('subscription.extended');
    expect(t.next).toMatchObject({ current_period_end: T0 + 10 * DAY, trial_end: T0 + 10 * DAY, period_anchor: T0 + 10 * DAY, status: 'active' });
    const paid = transition(sub('active'), { type: 'extend', days: 2 }, now).next;
    expect(paid.trial_end).toBeNull();
    expect(paid.current_period_end).toBe(sub('active').current_period_end + 2 * DAY);
  });

  it('a cancel or a plan archive never gives access the subscription did not have, whatever an extend added (found from outside)', () => {
    const events: LifecycleEvent[] = [{ type: 'cancel', by: 'merchant', immediate: false }, { type: 'plan_archived' }];
    const checkout = transition(startSubscription({ interval: 'monthly', trial_days: 0, grace_period_days: 0 }, now), EVENTS.extend!, now).next;
    const failed = transition(sub('payment_failed'), { type: 'extend', days: 60 }, now).next;
    const paused = sub('paused', { current_period_end: now - DAY });
    const resumed = transition(transition(paused, { type: 'resume' }, now).next, { type: 'extend', days: 10 }, now).next;
    expect(resumed.status).toBe('pending');
    for (const s of [checkout, failed, resumed]) {
      expect(s.current_period_end).toBeGreaterThan(now);
      expect(hasAccess(s, now)).toBe(false);
      for (const e of events) {
        const after = transition(s, e, now + 60).next;
        expect(after.status).toBe('cancelled');
        expect(hasAccess(after, now + 60)).toBe(false);
        expect(after.current_period_end).toBeLessThanOrEqual(now + 60);
      }
    }
    // A checkout's empty period ends where it began (notices say nothing was charged) ...
    const cancelled = transition(checkout, { type: 'cancel', by: 'merchant', immediate: false }, now + 60).next;
    expect(cancelled).toMatchObject({ current_period_start: now, current_period_end: now });
    // ... and a payment made before the cancel, handled after, still gets the days an extend granted.
    const late = transition(cancelled, { type: 'first_payment', paid_at: now + 30 }, now + 90).next;
    expect(late).toMatchObject({ status: 'cancelled', current_period_start: now + 30, current_period_end: periodEnd(now + 30 + 5 * DAY, 1, 'monthly') });
    // Access there was is kept: active, paused within its period.
    for (const s of [sub('active'), sub('paused')]) {
      const after = transition(s, { type: 'plan_archived' }, now).next;
      expect(after.current_period_end).toBe(s.current_period_end);
      expect(hasAccess(after, now)).toBe(true);
    }
  });

  it('extend moves trial_end only while the trial runs, not once it ended unpaid (found from outside)', () => {
    const trial = startSubscription({ interval: 'monthly', trial_days: 7, grace_period_days: 3 }, T0);
    const end = trial.current_period_end;
    const pastDue = transition(trial, { type: 'period_end_unpaid' }, end + 3600).next;
    expect(transition(pastDue, { type: 'extend', days: 5 }, end + 3600).next).toMatchObject({ current_period_end: end + 5 * DAY, trial_end: end });
    // Past its end with the scheduler behind (still active): as if the sweep had been on time.
    expect(transition(trial, { type: 'extend', days: 5 }, end + 3600).next).toMatchObject({ current_period_end: end + 5 * DAY, trial_end: end });
    const failed = transition(pastDue, { type: 'grace_end_unpaid' }, end + 3 * DAY).next;
    const expired = transition(failed, { type: 'dunning_end_unpaid' }, end + 20 * DAY).next;
    for (const s of [failed, expired]) expect(transition(s, { type: 'extend', days: 5 }, end + 20 * DAY).next.trial_end).toBe(end);
    // Paused or cancelled during the trial: it still runs until its end.
    for (const e of [{ type: 'pause' }, { type: 'cancel', by: 'merchant', immediate: false }] as const) {
      const s = transition(trial, e, T0 + DAY).next;
      expect(transition(s, { type: 'extend', days: 5 }, T0 + 2 * DAY).next.trial_end).toBe(end + 5 * DAY);
      expect(transition(s, { type: 'extend', days: 5 }, end).next.trial_end).toBe(end);
    }
  });

  it("what a subscriber's cancel leaves of the access, in every state the portal offers it (found from outside: grace promised)", () => {
    const end = sub('active').current_period_end;
    const after = (s: SubState, at: number) => {
      const cancelled = transition(s, { type: 'cancel', by: 'subscriber', immediate: false }, at).next;
      return accessUntil(cancelled, at);
    };
    const trial = startSubscription({ interval: 'monthly', trial_days: 10, grace_period_days: 3 }, now - DAY);
    const cases: [string, SubState, number, number | null][] = [
      ['active', sub('active'), now, end],
      ['trialing', trial, now, trial.trial_end],
      // Its grace is time to pay in, not paid time: a cancel ends it at once.
      ['past_due in grace', sub('past_due'), end + DAY, null],
      ['past_due past its grace', sub('past_due'), end + 4 * DAY, null],
      ['past_due extended past today', sub('past_due', { current_period_end: end + 30 * DAY }), end + DAY, end + 30 * DAY],
      ['payment_failed', sub('payment_failed'), end + 4 * DAY, null],
      ['paused in its period', sub('paused'), now, end],
      ['paused past its period', sub('paused'), end + DAY, null],
      ['pending checkout', sub('pending', { period_index: 0, current_period_end: T0, pending_since: T0 }), T0 + 60, null],
      ['pending after a resume', sub('pending', { pending_since: end + DAY }), end + DAY, null],
    ];
    for (const [name, s, at, until] of cases) {
      expect(accessAfterCancel(s, at), name).toBe(until);
      // The same as the cancel itself leaves.
      expect(after(s, at), name).toBe(until);
    }
    for (const s of ['cancelled', 'expired'] as const) expect(accessAfterCancel(sub(s), now), s).toBeNull();
  });

  it('has_access by status', () => {
    const end = sub('active').current_period_end;
    for (const s of ['active', 'past_due'] as const) expect(hasAccess({ status: s, current_period_end: 0 }, end + 1)).toBe(true);
    for (const s of ['pending', 'payment_failed', 'expired'] as const) expect(hasAccess({ status: s, current_period_end: end }, 0)).toBe(false);
    expect(hasAccess({ status: 'paused', current_period_end: end }, end - 1)).toBe(true);
    expect(hasAccess({ status: 'paused', current_period_end: end }, end)).toBe(false);
  });
});

describe('cancelledFacts: what a cancellation notice may say was charged (found from outside, review)', () => {
  const END = periodEnd(T0, 1, 'monthly');
  const trial = (status: SubscriptionStatus, over: Partial<SubState> = {}) => sub(status, { period_index: 0, trial_end: END, ...over });
  it('in its trial before the end: in_trial and never_paid', () => {
    expect(cancelledFacts(trial('active'), END - DAY)).toEqual({ in_trial: true, never_paid: true });
  });
  it('its trial over, not lapsed yet (the scheduler behind): never paid, not in its trial', () => {
    expect(cancelledFacts(trial('active'), END + 60)).toEqual({ never_paid: true });
  });
  it('its trial ended unpaid (past_due, payment_failed): never paid', () => {
    expect(cancelledFacts(trial('past_due'), END + DAY)).toEqual({ never_paid: true });
    expect(cancelledFacts(trial('payment_failed'), END + 5 * DAY)).toEqual({ never_paid: true });
  });
  it('a paid period (after a trial too): nothing to add', () => {
    expect(cancelledFacts(sub('active'), T0 + DAY)).toEqual({});
    expect(cancelledFacts(sub('active', { trial_end: T0 }), T0 + DAY)).toEqual({});
  });
});
