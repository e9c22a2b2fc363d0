import { describe, expect, it } from 'vitest';
import type { SubscriptionStatus } from '@sb/contracts';
import { renewalPeriod, renewalTerms, startSubscription, transition, type SubState } from '../src/domain/lifecycle.js';
import { applicationOf, expiredAt } from '../src/domain/payment-application.js';
import { LATEST_TIME, periodEnd } from '../src/domain/periods.js';
import { trialEndData } from '../src/transitions.js';
import {
  carryOpenRenewal,
  dueNow,
  lostRenewal,
  nextDueAt,
  noRenewalInvoice,
  renewalEndedEarly,
  resumeBookkeeping,
  renewalMade,
  renewalRefused,
  walletGone,
  walletReconnected,
  withdrawOpenRenewal,
  type Due,
  type ScheduleView,
} from '../src/domain/schedule.js';

const DAY = 86_400;
const T0 = Date.parse('2027-03-01T00:00:00Z') / 1000;
const END = periodEnd(T0, 1, 'monthly');
const POLICY = { dunning_days: 14 };

type Row = SubState & ScheduleView;

function sub(status: SubscriptionStatus, over: Partial<Row> = {}): Row {
  return {
    status,
    interval: 'monthly',
    grace_period_days: 3,
    period_anchor: T0,
    anchor_index: 0,
    period_index: 1,
    current_period_start: T0,
    current_period_end: END,
    trial_end: null,
    cancelled_at: null,
    cancel_reason: null,
    cancelled_by: null,
    cancelled_immediately: false,
    paused_at: null,
    stopped_at_ms: null,
    pending_since: status === 'pending' ? T0 : null,
    dunning_from: null,
    payment_method: 'lightning',
    receive_reminders: true,
    renewal_for: null,
    renewal_payment_id: null,
    renewal_expires_at: null,
    reminded_for: null,
    reminder_notified_at: null,
    nwc_next_attempt_at: null,
    nwc_fallback: false,
    nwc_charging_since: null,
    renewal_refused_for: null,
    renewal_refused_at: null,
    renewal_refused_reason: null,
    ...over,
  };
}
/** The open renewal of the current period, issued 3 days ahead, payable until `expires`. */
const issued = (expires: number, over: Partial<Row> = {}): Partial<Row> => ({
  renewal_for: END,
  renewal_payment_id: 'pay_1',
  renewal_expires_at: expires,
  reminder_notified_at: END - 3 * DAY,
  ...over,
});
const GRACE_END = END + 3 * DAY;
const DUNNING_END = GRACE_END + 14 * DAY;

/** Resumed after its period (ended at T0 + 1 day) on T0 + 2 days; its NWC wallet asked a second later. */
const RESUME_CHARGING = sub('pending', {
  current_period_end: T0 + DAY,
  pending_since: T0 + 2 * DAY,
  payment_method: 'nwc',
  renewal_payment_id: 'pay_2',
  nwc_charging_since: T0 + 2 * DAY + 1,
});

/** What is due, row by row: a subscription, a time, and the one thing the scheduler must do then. */
const TABLE: Array<{ name: string; s: Row; at: number; due: Partial<Due> & { kind: Due['kind'] } }> = [
  { name: 'pending before 24 h: nothing', s: sub('pending'), at: T0 + DAY - 1, due: { kind: 'none' } },
  {
    name: 'pending at 24 h: expires, subscriber not told',
    s: sub('pending'),
    at: T0 + DAY,
    due: { kind: 'lapse', event: 'pending_timeout', notify_subscriber: false },
  },
  {
    name: 'pending counts from pending_since, not from later updates',
    s: sub('pending', { pending_since: T0 - DAY }),
    at: T0,
    due: { kind: 'lapse', event: 'pending_timeout' },
  },
  {
    name: 'pending since a resume after the period: expires at 24 h, subscriber told why',
    s: sub('pending', { current_period_end: T0 + DAY, pending_since: T0 + 2 * DAY }),
    at: T0 + 3 * DAY,
    due: { kind: 'lapse', event: 'pending_timeout', notify_subscriber: true, reason: expect.stringMatching(/resumed/) },
  },
  {
    name: 'resumed after the period, its payment not made two minutes on (payments away, a crash): made now',
    s: sub('pending', { current_period_end: T0 + DAY, pending_since: T0 + 2 * DAY }),
    at: T0 + 2 * DAY + 120,
    due: { kind: 'resume_payment' },
  },
  {
    name: 'resumed after the period, within two minutes: nothing (the resume is making it)',
    s: sub('pending', { current_period_end: T0 + DAY, pending_since: T0 + 2 * DAY }),
    at: T0 + 2 * DAY + 119,
    due: { kind: 'none' },
  },
  {
    name: 'resumed after the period, its wallet asked and no answer recorded after the charge window: the reminder now',
    s: RESUME_CHARGING,
    at: T0 + 2 * DAY + 121,
    due: { kind: 'resume_payment' },
  },
  {
    name: 'resumed after the period, its wallet being asked: nothing within the charge window',
    s: RESUME_CHARGING,
    at: T0 + 2 * DAY + 120,
    due: { kind: 'none' },
  },
  {
    name: 'resumed after the period, its payment made: nothing until 24 h',
    s: sub('pending', { current_period_end: T0 + DAY, pending_since: T0 + 2 * DAY, renewal_payment_id: 'pay_2' }),
    at: T0 + 3 * DAY - 1,
    due: { kind: 'none' },
  },
  {
    name: 'payment_failed extended past now, its invoice expired: a new one (carried along by the extend)',
    s: sub('payment_failed', { current_period_end: END + 30 * DAY, ...issued(END + 2 * DAY, { renewal_for: END + 30 * DAY }) }),
    at: END + 2 * DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1' },
  },
  {
    name: 'past_due extended past now (found from outside): its carried invoice expiring is not replaced daily until the new lead time',
    s: sub('past_due', { current_period_end: END + 30 * DAY, ...issued(END + 2 * DAY, { renewal_for: END + 30 * DAY }) }),
    at: END + 27 * DAY - 1,
    due: { kind: 'none' },
  },
  {
    name: 'past_due extended past now: at the new lead time its carried invoice is replaced, the subscriber told',
    s: sub('past_due', { current_period_end: END + 30 * DAY, ...issued(END + 2 * DAY, { renewal_for: END + 30 * DAY }) }),
    at: END + 27 * DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1', last_call: false, notify_subscriber: true },
  },
  {
    name: 'past_due extended past now, once the new end is reached: replaced as soon as it expires, as in any grace',
    s: sub('past_due', {
      current_period_end: END + 30 * DAY,
      ...issued(END + 31 * DAY, { renewal_for: END + 30 * DAY, reminded_for: END + 30 * DAY, reminder_notified_at: END + 29 * DAY }),
    }),
    at: END + 31 * DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1', notify_subscriber: false },
  },
  {
    name: 'past_due extended past now: payment_failed at the new end plus grace, not before',
    s: sub('past_due', { current_period_end: END + 30 * DAY, ...issued(END + 34 * DAY, { renewal_for: END + 30 * DAY, reminded_for: END + 30 * DAY }) }),
    at: END + 33 * DAY,
    due: { kind: 'lapse', event: 'grace_end_unpaid', pay_by: END + 47 * DAY },
  },
  {
    name: 'NWC past_due extended past now: the wallet is not asked again before the new end',
    s: sub('past_due', {
      payment_method: 'nwc',
      current_period_end: END + 30 * DAY,
      ...issued(END + DAY, { renewal_for: END + 30 * DAY, nwc_next_attempt_at: END + 3600 }),
    }),
    at: END + 29 * DAY - 1,
    due: { kind: 'none' },
  },
  {
    // Its wallet is asked at the new end, as an active one's: no last call pointing at an invoice that
    // expired long ago (review finding), and no wallet charge before that end.
    name: 'NWC past_due extended past now: nothing a day before the new end',
    s: sub('past_due', {
      payment_method: 'nwc',
      current_period_end: END + 30 * DAY,
      ...issued(END + DAY, { renewal_for: END + 30 * DAY, nwc_next_attempt_at: END + 3600 }),
    }),
    at: END + 30 * DAY - 1,
    due: { kind: 'none' },
  },
  {
    name: 'NWC past_due extended past now: the wallet is asked at the new end',
    s: sub('past_due', {
      payment_method: 'nwc',
      current_period_end: END + 30 * DAY,
      ...issued(END + DAY, { renewal_for: END + 30 * DAY, nwc_next_attempt_at: END + 3600 }),
    }),
    at: END + 30 * DAY,
    due: { kind: 'charge_wallet', retry_at: END + 31 * DAY },
  },
  {
    name: 'payment_failed extended (found from outside): expired at the end of the dunning window that started at the lapse',
    s: sub('payment_failed', { current_period_end: END + 60 * DAY, dunning_from: GRACE_END, ...issued(DUNNING_END + DAY, { renewal_for: END + 60 * DAY }) }),
    at: DUNNING_END,
    due: { kind: 'lapse', event: 'dunning_end_unpaid', notify_subscriber: true },
  },
  {
    name: 'payment_failed extended: its invoice is not replaced after the dunning window',
    s: sub('payment_failed', { current_period_end: END + 60 * DAY, dunning_from: GRACE_END, ...issued(DUNNING_END - 1, { renewal_for: END + 60 * DAY }) }),
    at: DUNNING_END - 1,
    due: { kind: 'renewal_payment', replaces: 'pay_1' },
  },
  {
    name: 'active extended in its lead time (found in review): its invoice, carried along, expiring is not replaced daily until the new lead time',
    s: sub('active', { current_period_end: END + 60 * DAY, ...issued(END + DAY, { renewal_for: END + 60 * DAY }) }),
    at: END + 57 * DAY - 1,
    due: { kind: 'none' },
  },
  {
    name: 'active extended in its lead time: at the new lead time its carried invoice is replaced, the subscriber told',
    s: sub('active', { current_period_end: END + 60 * DAY, ...issued(END + DAY, { renewal_for: END + 60 * DAY }) }),
    at: END + 57 * DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1', notify_subscriber: true, trial_ending: false },
  },
  {
    name: 'active extended by a day in its lead time (found from outside): its invoice still payable at the new lead time is the only one',
    s: sub('active', { current_period_end: END + DAY, ...issued(END - DAY, { renewal_for: END + DAY }) }),
    at: END - 2 * DAY,
    due: { kind: 'none' },
  },
  { name: 'active before the lead time: nothing', s: sub('active'), at: END - 3 * DAY - 1, due: { kind: 'none' } },
  {
    name: 'active at the lead time: renewal payment, subscriber told',
    s: sub('active'),
    at: END - 3 * DAY,
    due: { kind: 'renewal_payment', replaces: null, last_call: false, notify_subscriber: true },
  },
  {
    name: 'renewal of a trial announces its end',
    s: sub('active', { trial_end: END }),
    at: END - 3 * DAY,
    due: { kind: 'renewal_payment', trial_ending: true },
  },
  {
    // Found from outside: "trial ending" a month after it ended, with the invoice made after the scheduler was away.
    name: 'first invoice of a trial made after the trial ended: not announced as ending',
    s: sub('payment_failed', { trial_end: END, dunning_from: END + 30 * DAY }),
    at: END + 30 * DAY + 60,
    due: { kind: 'renewal_payment', replaces: null, trial_ending: false },
  },
  {
    name: 'no reminders wanted: the owner still gets the event',
    s: sub('active', { receive_reminders: false }),
    at: END - 2 * DAY,
    due: { kind: 'renewal_payment', notify_subscriber: false },
  },
  { name: 'renewal issued, invoice valid: nothing', s: sub('active', issued(END - DAY - 10)), at: END - 2 * DAY, due: { kind: 'none' } },
  {
    name: 'invoice expired: replacement, subscriber not told again this week',
    s: sub('active', issued(END - 2 * DAY)),
    at: END - 2 * DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1', notify_subscriber: false },
  },
  { name: 'a day before the end: last call', s: sub('active', issued(END + DAY)), at: END - DAY, due: { kind: 'last_call', notify_subscriber: true } },
  { name: 'last call sent: nothing', s: sub('active', issued(END + DAY, { reminded_for: END })), at: END - 1, due: { kind: 'none' } },
  {
    name: 'replacement on the last day is the last call, told',
    s: sub('active', issued(END - DAY)),
    at: END - DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1', last_call: true, notify_subscriber: true },
  },
  {
    // Found from outside: "Payment due" a millisecond after "Payment failed" after a jump past the last call.
    name: 'an invoice replaced after the end is no last call: the subscriber was told of the lapse',
    s: sub('payment_failed', issued(END - DAY + 10, { grace_period_days: 0, dunning_from: END })),
    at: END + 60,
    due: { kind: 'renewal_payment', replaces: 'pay_1', last_call: false, notify_subscriber: false },
  },
  {
    name: 'period end unpaid, grace: past_due, subscriber told to pay by the end of grace',
    s: sub('active', issued(END + DAY, { reminded_for: END })),
    at: END,
    due: { kind: 'lapse', event: 'period_end_unpaid', notify_subscriber: true, pay_by: GRACE_END },
  },
  {
    name: 'period end unpaid, reminders declined: past_due, subscriber not told',
    s: sub('active', issued(END + DAY, { reminded_for: END, receive_reminders: false })),
    at: END,
    due: { kind: 'lapse', event: 'period_end_unpaid', notify_subscriber: false },
  },
  { name: 'past_due, invoice expired: replacement', s: sub('past_due', issued(END + DAY)), at: END + DAY, due: { kind: 'renewal_payment', replaces: 'pay_1' } },
  {
    name: 'grace over: payment_failed, payable until the end of dunning',
    s: sub('past_due', issued(GRACE_END + DAY)),
    at: GRACE_END,
    due: { kind: 'lapse', event: 'grace_end_unpaid', notify_subscriber: true, pay_by: DUNNING_END },
  },
  { name: 'payment_failed, invoice valid: nothing', s: sub('payment_failed', issued(GRACE_END + DAY)), at: GRACE_END + 1, due: { kind: 'none' } },
  {
    name: 'payment_failed, invoice expired: replacement (never a dead end)',
    s: sub('payment_failed', issued(GRACE_END + DAY)),
    at: GRACE_END + DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1' },
  },
  {
    name: 'payment_failed, a week after the last notice: subscriber told again',
    s: sub('payment_failed', issued(GRACE_END + 8 * DAY, { reminder_notified_at: GRACE_END })),
    at: GRACE_END + 8 * DAY,
    due: { kind: 'renewal_payment', notify_subscriber: true },
  },
  {
    name: 'dunning window over: expired, subscriber told even without reminders',
    s: sub('payment_failed', issued(DUNNING_END + DAY, { receive_reminders: false })),
    at: DUNNING_END,
    due: { kind: 'lapse', event: 'dunning_end_unpaid', notify_subscriber: true },
  },
  {
    name: 'dunning over with an expired invoice: expired, no new invoice',
    s: sub('payment_failed', issued(DUNNING_END - 1)),
    at: DUNNING_END,
    due: { kind: 'lapse', event: 'dunning_end_unpaid' },
  },
  {
    // Found from outside: after a long outage (or clock jump) an invoice and a "pay now" reminder went out
    // in the sweep that also expired the subscription.
    name: 'first seen after its dunning window: no invoice, no reminder; it lapses untold of a date gone by',
    s: sub('active'),
    at: DUNNING_END + DAY,
    due: { kind: 'lapse', event: 'period_end_unpaid', notify_subscriber: false },
  },
  {
    // Found from outside: it then expired at the next sweep, no invoice ever made; its window is from now.
    name: 'past_due first seen after its dunning window: payment_failed with a dunning window from now, told',
    s: sub('past_due'),
    at: DUNNING_END,
    due: { kind: 'lapse', event: 'grace_end_unpaid', notify_subscriber: true, pay_by: DUNNING_END + 14 * DAY },
  },
  {
    // Found from outside: the invoice went first, its reminder saying "if paid by" the end of a grace
    // already over when it came days late, then "Payment failed" in the same sweep.
    name: 'first seen during grace: past_due first, so that the invoice is made for the state it is in by then; its notice says the invoice follows',
    s: sub('active'),
    at: END + DAY,
    due: { kind: 'lapse', event: 'period_end_unpaid', notify_subscriber: true, invoice_to_follow: true },
  },
  {
    name: 'past_due with no invoice yet (the scheduler was away): the invoice it still needs, the subscriber told',
    s: sub('past_due'),
    at: END + DAY,
    due: { kind: 'renewal_payment', replaces: null, notify_subscriber: true, trial_ending: false },
  },
  {
    name: 'at the end with its invoice made: the lapse, with no invoice to follow',
    s: sub('active', issued(END + DAY)),
    at: END,
    due: { kind: 'lapse', event: 'period_end_unpaid', notify_subscriber: true },
  },
  {
    name: 'no grace: payment_failed at the end, payable until the end of dunning',
    s: sub('active', { grace_period_days: 0, ...issued(END + DAY, { reminded_for: END }) }),
    at: END,
    due: { kind: 'lapse', event: 'period_end_unpaid', pay_by: END + 14 * DAY },
  },
  { name: 'paused: nothing, ever', s: sub('paused', issued(END - DAY)), at: END + 100 * DAY, due: { kind: 'none' } },
  {
    name: 'resumed inside the lead time after a pause withdrew the invoice: replacement at once, subscriber told',
    s: sub('active', { ...issued(END + DAY), ...withdrawOpenRenewal(sub('active', issued(END + DAY)), END - 2 * DAY) }),
    at: END - 2 * DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1', notify_subscriber: true },
  },
  { name: 'cancelled: nothing', s: sub('cancelled'), at: END + DAY, due: { kind: 'none' } },
  { name: 'expired: nothing', s: sub('expired'), at: END + DAY, due: { kind: 'none' } },
  { name: 'NWC: no invoice ahead', s: sub('active', { payment_method: 'nwc' }), at: END - 3 * DAY, due: { kind: 'none' } },
  {
    name: 'NWC trial: its end announced a day before',
    s: sub('active', { payment_method: 'nwc', trial_end: END }),
    at: END - DAY,
    due: { kind: 'trial_ending' },
  },
  {
    name: 'NWC at period end: charged, retried in an hour',
    s: sub('active', { payment_method: 'nwc' }),
    at: END,
    due: { kind: 'charge_wallet', first: true, retry_at: END + 3600 },
  },
  {
    name: 'NWC while a replica waits for the wallet: nothing',
    s: sub('active', { payment_method: 'nwc', ...issued(END + DAY, { nwc_next_attempt_at: END + 3600, nwc_charging_since: END }) }),
    at: END + 10,
    due: { kind: 'none' },
  },
  {
    name: 'NWC paid, consumer not yet applied it: nothing, the period does not lapse',
    s: sub('active', { payment_method: 'nwc', ...issued(END + DAY) }),
    at: END + 60,
    due: { kind: 'none' },
  },
  {
    name: 'NWC failed charge: period lapses meanwhile, the subscriber told the wallet is asked again',
    s: sub('active', { payment_method: 'nwc', ...issued(END + DAY, { nwc_next_attempt_at: END + 3600 }) }),
    at: END + 60,
    due: { kind: 'lapse', event: 'period_end_unpaid', pay_by: GRACE_END, wallet_retries: true, wallet_failed: true },
  },
  {
    name: 'NWC without grace (found from outside): access ends, and the notice says the wallet did not pay',
    s: sub('active', { payment_method: 'nwc', grace_period_days: 0, ...issued(END + DAY, { nwc_next_attempt_at: END + 3600 }) }),
    at: END + 60,
    due: { kind: 'lapse', event: 'period_end_unpaid', pay_by: END + 14 * DAY, wallet_failed: true },
  },
  {
    name: 'a free trial that ended unpaid: the past-due notice says so (found from outside)',
    s: sub('active', { trial_end: END, ...issued(END + DAY, { reminded_for: END }) }),
    at: END,
    due: { kind: 'lapse', event: 'period_end_unpaid', pay_by: GRACE_END, after_trial: true },
  },
  {
    name: 'NWC wallet connected again in grace (found from outside: nothing was ever due): charged at once',
    s: sub('past_due', {
      payment_method: 'nwc',
      ...issued(END + DAY),
      ...walletReconnected({ renewal_for: END, current_period_end: END }, END + 2 * DAY),
    }),
    at: END + 2 * DAY,
    due: { kind: 'charge_wallet', first: false },
  },
  {
    name: 'NWC wallet connected again after the grace: the subscription lapses as unpaid',
    s: sub('past_due', {
      payment_method: 'nwc',
      ...issued(END + DAY),
      ...walletReconnected({ renewal_for: END, current_period_end: END }, GRACE_END + DAY),
    }),
    at: GRACE_END + DAY,
    due: { kind: 'lapse', event: 'grace_end_unpaid' },
  },
  {
    name: 'NWC wallet gone (invoice fallback): past_due says nothing of wallet retries',
    s: sub('active', { payment_method: 'nwc', nwc_fallback: true, ...issued(END + DAY, { reminded_for: END }) }),
    at: END,
    due: { kind: 'lapse', event: 'period_end_unpaid', pay_by: GRACE_END },
  },
  {
    name: 'NWC retry during grace: daily after that',
    s: sub('past_due', { payment_method: 'nwc', ...issued(END + DAY, { nwc_next_attempt_at: END + 3600 }) }),
    at: END + 3600,
    due: { kind: 'charge_wallet', first: false, retry_at: END + 3600 + DAY },
  },
  {
    name: 'NWC in payment_failed: invoices like everyone else',
    s: sub('payment_failed', { payment_method: 'nwc', ...issued(GRACE_END, { nwc_next_attempt_at: GRACE_END + 10 }) }),
    at: GRACE_END + DAY,
    due: { kind: 'renewal_payment', replaces: 'pay_1' },
  },
  {
    name: 'NWC fallen back to invoices: invoiced ahead',
    s: sub('active', { payment_method: 'nwc', nwc_fallback: true }),
    at: END - 3 * DAY,
    due: { kind: 'renewal_payment' },
  },
];

describe('dunning notices with no dunning window', () => {
  it('the lapse is not announced to the subscriber when nothing is left to pay by (the expiry follows)', () => {
    const none = { dunning_days: 0 };
    const noGrace = sub('active', { grace_period_days: 0, ...issued(END + DAY, { reminded_for: END }) });
    expect(dueNow(noGrace, END, none)).toMatchObject({ kind: 'lapse', event: 'period_end_unpaid', notify_subscriber: false, pay_by: END });
    expect(dueNow(sub('past_due', issued(GRACE_END + DAY)), GRACE_END, none)).toMatchObject({
      kind: 'lapse',
      event: 'grace_end_unpaid',
      notify_subscriber: false,
    });
    expect(dueNow(sub('payment_failed', issued(GRACE_END + DAY)), GRACE_END, none)).toMatchObject({
      kind: 'lapse',
      event: 'dunning_end_unpaid',
      notify_subscriber: true,
    });
  });
});

describe('what is due (domain/schedule.ts), row by row', () => {
  for (const row of TABLE) {
    it(row.name, () => {
      expect(dueNow(row.s, row.at, POLICY)).toMatchObject(row.due);
    });
  }

  it('only a wallet that is still asked to pay makes a past-due step say so', () => {
    const fallback = sub('active', { payment_method: 'nwc', nwc_fallback: true, ...issued(END + DAY, { reminded_for: END }) });
    expect(dueNow(fallback, END, POLICY)).not.toHaveProperty('wallet_retries');
    expect(dueNow(sub('active', issued(END + DAY, { reminded_for: END })), END, POLICY)).not.toHaveProperty('wallet_retries');
    for (const s of [fallback, sub('active', issued(END + DAY, { reminded_for: END }))]) {
      expect(dueNow(s, END, POLICY)).not.toHaveProperty('wallet_failed');
      expect(dueNow(s, END, POLICY)).not.toHaveProperty('after_trial');
    }
  });

  it('a period after which no whole one fits before 9999-12-31 is the last: no renewal, reminder or wallet charge, nothing due', () => {
    const latest = LATEST_TIME - 20 * DAY; // a month from it is in year 10000
    for (const payment_method of ['lightning', 'nwc'] as const) {
      const last = sub('active', { current_period_end: latest, payment_method });
      for (const at of [latest - 7 * DAY, latest - DAY, latest, latest + DAY]) expect(dueNow(last, at, POLICY).kind, `${payment_method} ${at}`).toBe('none');
      expect(nextDueAt(last, latest - 7 * DAY, POLICY)).toBeNull();
      // A past_due one an extend moved into that period: the same (found in review: it was sold a renewal).
      const extended = sub('past_due', { current_period_end: latest, payment_method, ...issued(latest - 10 * DAY, { renewal_for: latest }) });
      for (const at of [latest - 7 * DAY, latest - DAY, latest]) expect(dueNow(extended, at, POLICY).kind, `past_due ${payment_method} ${at}`).toBe('none');
    }
    // The period before it still renews, as any other: its whole next period ends within 9999.
    const before = sub('active', { current_period_end: LATEST_TIME - 40 * DAY, interval: 'weekly' });
    expect(dueNow(before, LATEST_TIME - 40 * DAY - DAY, POLICY).kind).toBe('renewal_payment');
  });

  it('nextDueAt is the first time something is due, and nothing is due before it', () => {
    for (const row of TABLE) {
      const from = row.at - 5 * DAY;
      const next = nextDueAt(row.s, from, POLICY);
      if (next === null) {
        for (let t = from; t < from + 200 * DAY; t += 3600) expect(dueNow(row.s, t, POLICY).kind, row.name).toBe('none');
        continue;
      }
      expect(dueNow(row.s, next, POLICY).kind, row.name).not.toBe('none');
      for (let t = from; t < next; t += 1800) expect(dueNow(row.s, t, POLICY).kind, `${row.name} at ${t - from}`).toBe('none');
    }
  });
});

/**
 * Every non-terminal state, walked forward in time with no payment: the scheduler's decisions applied as
 * it applies them. Each ends in expired or cancelled, or stays paused (the owner's choice); none is left
 * where nothing more can happen.
 */
describe('no dead ends: every state, no payment, time moves on', () => {
  const INVOICE_LIFE = DAY;
  function walk(start: Row, from: number): { status: SubscriptionStatus; at: number; path: string[] } {
    let s = { ...start };
    let t = from;
    const path: string[] = [s.status];
    for (let i = 0; i < 2000; i++) {
      const next = nextDueAt(s, t, POLICY);
      if (next === null) return { status: s.status, at: t, path };
      t = next;
      const due = dueNow(s, t, POLICY);
      const end = s.current_period_end;
      switch (due.kind) {
        case 'lapse':
          s = { ...s, ...transition(s, { type: due.event }, t).next };
          path.push(s.status);
          break;
        case 'renewal_payment':
          s = {
            ...s,
            renewal_for: end,
            renewal_payment_id: `pay_${i}`,
            renewal_expires_at: t + INVOICE_LIFE,
            reminded_for: due.last_call ? end : s.reminded_for,
            reminder_notified_at: due.notify_subscriber ? t : s.reminder_notified_at,
          };
          break;
        case 'last_call':
        case 'trial_ending':
          s = { ...s, reminded_for: end };
          break;
        case 'charge_wallet': // the wallet does not pay
          s = {
            ...s,
            renewal_for: end,
            renewal_payment_id: `pay_${i}`,
            renewal_expires_at: t + INVOICE_LIFE,
            nwc_next_attempt_at: due.retry_at,
            nwc_charging_since: null,
          };
          break;
        case 'resume_payment': // made and linked, the reminder sent; nobody pays it
          s = { ...s, renewal_payment_id: s.renewal_payment_id ?? `pay_${i}`, nwc_charging_since: null };
          break;
        case 'none':
          throw new Error('nextDueAt named a time with nothing due');
      }
    }
    throw new Error(`no end after 2000 steps: ${path.join(' -> ')}`);
  }

  const variants: Array<{ name: string; s: Row }> = [];
  for (const interval of ['weekly', 'monthly', 'yearly'] as const) {
    for (const grace of [0, 3, 90]) {
      for (const method of ['lightning', 'onchain', 'nwc'] as const) {
        const end = periodEnd(T0, 1, interval);
        const base = { interval, grace_period_days: grace, current_period_end: end, payment_method: method };
        variants.push({ name: `${interval} grace ${grace} ${method} active`, s: sub('active', base) });
        variants.push({ name: `${interval} grace ${grace} ${method} trial`, s: sub('active', { ...base, trial_end: end, period_index: 0 }) });
        variants.push({ name: `${interval} grace ${grace} ${method} past_due`, s: sub('past_due', base) });
        variants.push({ name: `${interval} grace ${grace} ${method} payment_failed`, s: sub('payment_failed', base) });
        variants.push({
          name: `${interval} grace ${grace} ${method} pending checkout`,
          s: { ...sub('pending', base), ...startSubscription({ interval, trial_days: 0, grace_period_days: grace }, T0), payment_method: method },
        });
        variants.push({
          name: `${interval} grace ${grace} ${method} resumed after its end (pending)`,
          s: {
            ...sub('paused', base),
            ...transition(sub('paused', base), { type: 'resume' }, end + DAY).next,
            ...resumeBookkeeping(sub('paused', base), end + DAY),
          },
        });
      }
    }
  }

  for (const v of variants) {
    it(`${v.name} ends in expired`, () => {
      const r = walk(v.s, T0 + 1);
      expect(r.status, r.path.join(' -> ')).toBe('expired');
      // Within the period, grace and dunning window (and the 24 h of a pending one).
      expect(r.at - T0).toBeLessThanOrEqual(400 * DAY + 90 * DAY + 14 * DAY);
    });
  }

  it('paused stays paused (the owner resumes or cancels), cancelled and expired are final', () => {
    for (const status of ['paused', 'cancelled', 'expired'] as const) {
      expect(walk(sub(status), T0).status).toBe(status);
      expect(nextDueAt(sub(status), T0, POLICY)).toBeNull();
    }
  });
});

describe('late payments (domain/payment-application.ts)', () => {
  const paid = (purpose: 'checkout' | 'renewal', over: { for_current_period?: boolean; amount_sats?: number } = {}) => ({
    purpose,
    paid_at: T0,
    amount_sats: 1000,
    for_current_period: true,
    ...over,
  });
  // An activated subscription whose monthly period began at T0 - 30 days and ended at T0, with 3 grace days.
  const view = (status: SubscriptionStatus, over: Partial<Parameters<typeof applicationOf>[1] & object> = {}) => ({
    status,
    cancelled_at: null,
    cancelled_immediately: false,
    paused_at: null,
    stopped_at_ms: null,
    amount_sats: 1000,
    current_period_start: T0 - 30 * DAY,
    current_period_end: T0,
    grace_period_days: 3,
    pending_since: T0 - 31 * DAY,
    period_index: 1,
    trial_end: null,
    ...over,
  });
  // Its dunning window ends 3 + 14 days after the period.
  const WINDOW_END = T0 + 17 * DAY;

  it('a checkout paid in time activates its subscription', () => {
    expect(applicationOf(paid('checkout'), view('pending'), undefined, POLICY)).toMatchObject({ to: 'own', event: { type: 'first_payment' } });
  });
  it('an expired checkout paid late: reactivated when the contact has nothing newer', () => {
    expect(applicationOf(paid('checkout'), view('expired'), undefined, POLICY)).toMatchObject({ to: 'own', event: { type: 'first_payment' } });
  });
  it('an expired subscription of an archived plan is not brought back, by a late checkout or renewal (found from outside)', () => {
    const archived = { archived: true };
    for (const payment of [paid('checkout'), { ...paid('renewal'), paid_at: T0 + DAY }]) {
      expect(applicationOf(payment, view('expired', { period_index: 0 }), undefined, POLICY, archived)).toEqual({
        to: 'none',
        reason: 'The plan was archived; its subscriptions do not start again',
      });
    }
    // A cancelled checkout (the archive's cascade) paid before the cancel is still applied as in time: it stays cancelled.
    expect(applicationOf(paid('checkout'), view('cancelled', { period_index: 0, cancelled_at: T0 + 10 }), undefined, POLICY, archived)).toMatchObject({
      to: 'own',
    });
  });
  it('an expired checkout paid late while the contact has a new pending checkout: activates that one', () => {
    expect(applicationOf(paid('checkout'), view('expired'), view('pending'), POLICY)).toMatchObject({
      to: 'contact_pending',
      event: { type: 'first_payment' },
    });
  });
  it('... but not when it is too small for it', () => {
    expect(applicationOf(paid('checkout', { amount_sats: 500 }), view('expired'), view('pending'), POLICY)).toMatchObject({ to: 'none' });
  });
  it('an expired checkout paid late while the contact is active again: not applied, with the reason', () => {
    expect(applicationOf(paid('checkout'), view('expired'), view('active'), POLICY)).toEqual({
      to: 'none',
      reason: 'The subscriber already has an active subscription to this plan',
    });
  });
  it('a renewal for a period already paid: not applied', () => {
    expect(applicationOf(paid('renewal', { for_current_period: false }), view('active'), undefined, POLICY)).toMatchObject({ to: 'none' });
  });
  it('a renewal during payment_failed: applied (new period from paid_at)', () => {
    expect(applicationOf(paid('renewal'), view('payment_failed'), undefined, POLICY)).toMatchObject({ to: 'own', event: { type: 'renewal_payment' } });
  });
  it("a renewal after dunning expired it: the contact's pending checkout, or not applied", () => {
    const late = { ...paid('renewal'), paid_at: WINDOW_END + 60 };
    expect(applicationOf(late, view('expired'), view('pending'), POLICY)).toMatchObject({ to: 'contact_pending' });
    expect(applicationOf(late, view('expired'), undefined, POLICY)).toMatchObject({ to: 'none' });
  });
  it('a renewal paid inside the dunning window, handled after the sweep expired it: renewed from paid_at', () => {
    const paidInWindow = { ...paid('renewal'), paid_at: WINDOW_END - 60 };
    expect(applicationOf(paidInWindow, view('expired'), undefined, POLICY)).toEqual({
      to: 'own',
      event: { type: 'renewal_payment', paid_at: WINDOW_END - 60 },
    });
    const s: SubState = { ...sub('expired'), current_period_start: T0 - 30 * DAY, current_period_end: T0, grace_period_days: 3 };
    expect(transition(s, { type: 'renewal_payment', paid_at: WINDOW_END - 60 }, WINDOW_END + DAY).next).toMatchObject({
      status: 'active',
      current_period_start: WINDOW_END - 60,
      current_period_end: periodEnd(WINDOW_END - 60, 1, 'monthly'),
    });
  });
  it('... but paid at or after the dunning end: not applied; nor when the contact has subscribed again', () => {
    expect(applicationOf({ ...paid('renewal'), paid_at: WINDOW_END }, view('expired'), undefined, POLICY)).toEqual({
      to: 'none',
      reason: 'The subscription is expired; the payment arrived too late to be applied',
    });
    expect(applicationOf({ ...paid('renewal'), paid_at: WINDOW_END - 60 }, view('expired'), view('active'), POLICY)).toEqual({
      to: 'none',
      reason: 'The subscriber already has an active subscription to this plan',
    });
    expect(applicationOf({ ...paid('renewal'), paid_at: WINDOW_END - 60 }, view('expired'), view('pending'), POLICY)).toMatchObject({ to: 'contact_pending' });
  });
  it('an expired resume (pending after its period ended, 24 h unpaid): applied only when paid within those 24 h', () => {
    const resumed = view('expired', { pending_since: T0 + 2 * DAY });
    expect(expiredAt(resumed, POLICY)).toBe(T0 + 3 * DAY);
    expect(applicationOf({ ...paid('renewal'), paid_at: T0 + 3 * DAY - 1 }, resumed, undefined, POLICY)).toMatchObject({ to: 'own' });
    expect(applicationOf({ ...paid('renewal'), paid_at: T0 + 3 * DAY }, resumed, undefined, POLICY)).toMatchObject({ to: 'none' });
  });
  it('a checkout paid after it was cancelled unpaid says so; one paid again after activation says it was paid', () => {
    const cancelledUnpaid = view('cancelled', { period_index: 0, current_period_start: T0, current_period_end: T0, pending_since: T0 });
    expect(applicationOf(paid('checkout'), { ...cancelledUnpaid, cancelled_at: T0 - 1 }, undefined, POLICY)).toEqual({
      to: 'none',
      reason: 'The subscription was cancelled before its first payment arrived',
    });
    // Paid before the cancel, however late its event: applied as it would have been in time.
    expect(applicationOf(paid('checkout'), { ...cancelledUnpaid, cancelled_at: T0 + 1 }, undefined, POLICY)).toMatchObject({
      to: 'own',
      event: { type: 'first_payment', paid_at: T0 },
    });
    // In the cancel's second the order is unknown: the tie goes to the cancel.
    expect(applicationOf(paid('checkout'), { ...cancelledUnpaid, cancelled_at: T0 }, undefined, POLICY)).toEqual({
      to: 'none',
      reason: 'The subscription was cancelled before its first payment arrived',
    });
    expect(applicationOf(paid('checkout'), view('cancelled'), undefined, POLICY)).toEqual({
      to: 'none',
      reason: 'The subscription is cancelled; its first payment was already made',
    });
    expect(applicationOf(paid('checkout'), view('active'), undefined, POLICY)).toEqual({
      to: 'none',
      reason: 'The subscription is active; its first payment was already made',
    });
  });
  it('a checkout paid before its cancel while the contact has a new checkout of the plan: that one is activated, as for an expired one', () => {
    const cancelledUnpaid = view('cancelled', { period_index: 0, current_period_start: T0, current_period_end: T0, pending_since: T0, cancelled_at: T0 + 5 });
    expect(applicationOf(paid('checkout'), cancelledUnpaid, view('pending'), POLICY)).toEqual({
      to: 'contact_pending',
      event: { type: 'first_payment', paid_at: T0 },
    });
    expect(applicationOf(paid('checkout'), cancelledUnpaid, view('active'), POLICY)).toEqual({
      to: 'none',
      reason: 'The subscriber already has an active subscription to this plan',
    });
  });
  it('a checkout paid before an immediate cancel: not applied (its period ended at the cancel), or the new checkout is activated', () => {
    const cancelledNow = view('cancelled', {
      period_index: 0,
      current_period_start: T0 + 5,
      current_period_end: T0 + 5,
      pending_since: T0,
      cancelled_at: T0 + 5,
      cancelled_immediately: true,
    });
    expect(applicationOf(paid('checkout'), cancelledNow, undefined, POLICY)).toEqual({
      to: 'none',
      reason: 'The subscription was cancelled at once, before its first payment arrived',
    });
    expect(applicationOf(paid('checkout'), cancelledNow, view('pending'), POLICY)).toMatchObject({ to: 'contact_pending' });
  });
  it('a renewal paid before a pause or a cancel, handled after: renewed from the old end, still paused or cancelled', () => {
    // The period ends at T0 + 1 h; renewal paid at T0, the owner's move a minute later.
    const open = { current_period_start: T0 - 7 * DAY + 3600, current_period_end: T0 + 3600 };
    const paused = view('paused', { ...open, paused_at: T0 + 60 });
    const cancelled = view('cancelled', { ...open, cancelled_at: T0 + 60 });
    const cancelledWhilePaused = view('cancelled', { ...open, paused_at: T0 - 60, cancelled_at: T0 + 60 });
    for (const s of [paused, cancelled])
      expect(applicationOf(paid('renewal'), s, undefined, POLICY)).toEqual({ to: 'own', event: { type: 'renewal_payment', paid_at: T0 } });
    for (const st of ['paused', 'cancelled'] as const) {
      const row: SubState = { ...sub(st), ...open, paused_at: st === 'paused' ? T0 + 60 : null, cancelled_at: st === 'cancelled' ? T0 + 60 : null };
      expect(transition(row, { type: 'renewal_payment', paid_at: T0 }, T0 + 120)).toMatchObject({
        event: 'subscription.renewed',
        next: { status: st, current_period_start: T0 + 3600, period_index: row.period_index + 1 },
      });
      // Asked now, after the move: no renewal applies to it (reminders promise none).
      expect(renewalPeriod(row, T0 + 120)).toBeNull();
    }
    // Paid in the move's second, or after it, or while paused before a cancel: not applied.
    for (const s of [paused, cancelled]) expect(applicationOf({ ...paid('renewal'), paid_at: T0 + 60 }, s, undefined, POLICY)).toMatchObject({ to: 'none' });
    expect(applicationOf(paid('renewal'), cancelledWhilePaused, undefined, POLICY)).toMatchObject({ to: 'none' });
    // Nor after a cancel at once (access ended: refunded), nor for another period.
    expect(applicationOf(paid('renewal'), { ...cancelled, cancelled_immediately: true }, undefined, POLICY)).toEqual({
      to: 'none',
      reason: 'The subscription was cancelled at once, after this renewal was paid',
    });
    expect(applicationOf(paid('renewal', { for_current_period: false }), paused, undefined, POLICY)).toMatchObject({ to: 'none' });
  });
  it('in the second of the move, the milliseconds of both order them; without either, the move came first (found from outside)', () => {
    const open = { current_period_start: T0 - 7 * DAY + 3600, current_period_end: T0 + 3600 };
    const at = (ms: number) => T0 * 1000 + ms;
    const paused = (ms: number | null) => view('paused', { ...open, paused_at: T0, stopped_at_ms: ms === null ? null : at(ms) });
    const cancelled = (ms: number | null) => view('cancelled', { ...open, cancelled_at: T0, stopped_at_ms: ms === null ? null : at(ms) });
    const renewal = (ms: number | null | undefined) => ({ ...paid('renewal'), paid_at: T0, paid_at_ms: ms == null ? ms : at(ms) });
    for (const s of [paused, cancelled]) {
      expect(applicationOf(renewal(100), s(400), undefined, POLICY)).toEqual({
        to: 'own',
        event: { type: 'renewal_payment', paid_at: T0, at_ms: at(100) },
      });
      for (const [p, m] of [
        [400, 400],
        [500, 400],
        [null, 400],
        [100, null],
        // A millisecond of another second (another reading of the clock) says nothing of this one.
        [-100, 400],
      ] as const)
        expect(applicationOf(renewal(p), s(m), undefined, POLICY), `paid ${p}, moved ${m}`).toMatchObject({ to: 'none' });
    }
    // The table agrees with the decision it applies.
    const row: SubState = { ...sub('paused'), ...open, paused_at: T0, stopped_at_ms: at(400) };
    expect(transition(row, { type: 'renewal_payment', paid_at: T0, at_ms: at(100) }, T0 + 1).event).toBe('subscription.renewed');
    expect(() => transition(row, { type: 'renewal_payment', paid_at: T0, at_ms: at(400) }, T0 + 1)).toThrow();
    // A checkout paid in its cancel's second, before it: activated.
    const cancelledUnpaid = view('cancelled', { period_index: 0, current_period_start: T0, current_period_end: T0, pending_since: T0 - 60, cancelled_at: T0 });
    const checkout = { ...paid('checkout'), paid_at: T0, paid_at_ms: at(100) };
    expect(applicationOf(checkout, { ...cancelledUnpaid, stopped_at_ms: at(400) }, undefined, POLICY)).toMatchObject({ to: 'own' });
    expect(applicationOf(checkout, { ...cancelledUnpaid, stopped_at_ms: at(50) }, undefined, POLICY)).toMatchObject({ to: 'none' });
  });
  it("a pause and a cancel record their millisecond; a cancel while paused keeps the pause's; a resume clears it", () => {
    const active = sub('active');
    const ms = T0 * 1000 + 250;
    const paused = transition(active, { type: 'pause', at_ms: ms }, T0).next;
    expect(paused).toMatchObject({ paused_at: T0, stopped_at_ms: ms });
    expect(transition(paused, { type: 'cancel', by: 'merchant', immediate: false, at_ms: ms + 5000 }, T0 + 5).next.stopped_at_ms).toBe(ms);
    expect(transition(paused, { type: 'resume', at_ms: ms + 5000 }, T0 + 5).next.stopped_at_ms).toBeNull();
    expect(transition(active, { type: 'cancel', by: 'subscriber', immediate: false, at_ms: ms }, T0).next.stopped_at_ms).toBe(ms);
    expect(transition(active, { type: 'plan_archived', at_ms: ms }, T0).next.stopped_at_ms).toBe(ms);
    // A millisecond outside the move's second is not its own: unknown.
    expect(transition(active, { type: 'pause', at_ms: ms + 1000 }, T0).next.stopped_at_ms).toBeNull();
    expect(transition(active, { type: 'pause' }, T0).next.stopped_at_ms).toBeNull();
  });
  it('cancelled or paused subscriptions and unknown ones: not applied', () => {
    for (const s of ['cancelled', 'paused'] as const) expect(applicationOf(paid('renewal'), view(s), undefined, POLICY)).toMatchObject({ to: 'none' });
    expect(applicationOf(paid('checkout'), undefined, undefined, POLICY)).toMatchObject({ to: 'none' });
  });
});

describe('renewalEndedEarly', () => {
  const at = END - 2 * DAY;
  it("the period's open renewal ended at the provider: replaced at once, by the same rule as an expired one", () => {
    const s = sub('active', issued(END + DAY));
    const change = renewalEndedEarly(s, 'pay_1', at);
    expect(change).toEqual({ renewal_expires_at: at });
    expect(dueNow({ ...s, ...change }, at, POLICY)).toMatchObject({ kind: 'renewal_payment', replaces: 'pay_1' });
  });
  it('another payment, one of an earlier period, or one already expired or withdrawn: nothing', () => {
    expect(renewalEndedEarly(sub('active', issued(END + DAY)), 'pay_other', at)).toBeNull();
    expect(renewalEndedEarly(sub('active', issued(END + DAY, { renewal_for: END - 30 * DAY })), 'pay_1', at)).toBeNull();
    expect(renewalEndedEarly(sub('active', issued(at)), 'pay_1', at)).toBeNull();
    expect(renewalEndedEarly(sub('active'), 'pay_1', at)).toBeNull();
  });
});

describe('a scheduler away past the dunning window (found from outside: expired, no invoice ever made)', () => {
  /** The subscription as the sweeps after `from` leave it, the invoices it was given, until `until`. */
  function sweep(start: Row, from: number, until: number) {
    let s = { ...start };
    const invoices: number[] = [];
    for (let t = from; t <= until; t += 60 * 60) {
      const due = dueNow(s, t, POLICY);
      if (due.kind === 'lapse') s = { ...s, ...transition(s, { type: due.event }, t).next };
      else if (due.kind === 'renewal_payment') {
        invoices.push(t);
        s = { ...s, renewal_for: s.current_period_end, renewal_payment_id: `pay_${t}`, renewal_expires_at: t + DAY };
      }
      if (s.status === 'expired') return { s, invoices, at: t };
    }
    return { s, invoices, at: until };
  }

  for (const grace of [0, 3]) {
    it(`grace ${grace}: back a month after the period ended, it gets an invoice and 14 days to pay it`, () => {
      const back = END + 30 * DAY;
      const { s, invoices, at } = sweep(sub('active', { grace_period_days: grace }), back, back + 20 * DAY);
      expect(invoices[0]).toBeLessThanOrEqual(back + 2 * 60 * 60);
      expect(s.status).toBe('expired');
      expect(at).toBeGreaterThanOrEqual(back + 14 * DAY);
      expect(at).toBeLessThanOrEqual(back + 14 * DAY + 2 * 60 * 60);
    });
  }

  it('a step into payment_failed a few minutes late keeps the window from the grace end', () => {
    const late = transition(sub('past_due'), { type: 'grace_end_unpaid' }, GRACE_END + 600).next;
    expect(late).toMatchObject({ status: 'payment_failed' });
    expect(late.dunning_from ?? null).toBeNull();
    expect(dueNow({ ...sub('past_due'), ...late }, DUNNING_END, POLICY)).toMatchObject({ kind: 'lapse', event: 'dunning_end_unpaid' });
  });
});

describe('a lapse and an expired invoice due at once', () => {
  it('the lapse goes first, so the replacement is made in the state it leads to (found from outside)', () => {
    // The invoice expired while the clock jumped past the grace: replaced as past_due, it said the old
    // period, and the payment_failed that followed in the same sweep a new one from the payment.
    const graceOver = sub('past_due', issued(END + DAY));
    expect(dueNow(graceOver, GRACE_END, POLICY)).toMatchObject({ kind: 'lapse', event: 'grace_end_unpaid' });
    expect(dueNow({ ...graceOver, status: 'payment_failed' }, GRACE_END, POLICY)).toMatchObject({ kind: 'renewal_payment', replaces: 'pay_1' });
    const periodOver = sub('active', issued(END - DAY, { reminded_for: END }));
    expect(dueNow(periodOver, END, POLICY)).toMatchObject({ kind: 'lapse', event: 'period_end_unpaid' });
    expect(dueNow({ ...periodOver, status: 'past_due' }, END, POLICY)).toMatchObject({ kind: 'renewal_payment', replaces: 'pay_1' });
    // Before the end, an expired invoice is replaced as before.
    expect(dueNow(periodOver, END - 3600, POLICY)).toMatchObject({ kind: 'renewal_payment', replaces: 'pay_1' });
  });
});

describe('a renewal payment the payments service refused to make (found from outside: a card renewal under the minimum)', () => {
  const LEAD = END - 3 * DAY;
  /** Refused when it was first asked for, at the lead time. */
  const refused = (status: SubscriptionStatus, over: Partial<Row> = {}) =>
    sub(status, { ...renewalRefused({ current_period_end: END }, LEAD, 'refused'), ...over });

  it('is not asked again within a day, and the period lapses at its end as an unpaid one, saying no invoice was made', () => {
    expect(dueNow(refused('active'), LEAD + 60, POLICY).kind).toBe('none');
    // Asked again the day before the end, refused again: the end comes before the next ask.
    expect(dueNow(refused('active', { renewal_refused_at: END - DAY / 2 }), END, POLICY)).toMatchObject({
      kind: 'lapse',
      event: 'period_end_unpaid',
      renewal_refused: true,
      pay_by: GRACE_END,
    });
    // The day over at the end itself: asked first, and the lapse follows in the next pass of the sweep;
    // a trial's is not "ending" any more (review finding), and the lapse says no invoice follows.
    expect(dueNow(refused('active'), END, POLICY)).toMatchObject({ kind: 'renewal_payment' });
    expect(dueNow(refused('active', { trial_end: END }), END, POLICY)).toMatchObject({ kind: 'renewal_payment', trial_ending: false });
    expect(dueNow(refused('active', { renewal_refused_at: END - DAY / 2 }), END, POLICY)).not.toHaveProperty('invoice_to_follow');
    expect(dueNow(sub('active', issued(END + DAY)), END, POLICY)).not.toHaveProperty('invoice_to_follow');
    // Before the fix: a renewal_payment at every sweep, and no lapse until the dunning window was over.
    expect(dueNow(refused('past_due', { renewal_refused_at: GRACE_END - DAY / 2 }), GRACE_END, POLICY)).toMatchObject({
      kind: 'lapse',
      event: 'grace_end_unpaid',
      renewal_refused: true,
    });
    expect(nextDueAt(refused('active'), LEAD + 60, POLICY)).toBe(LEAD + DAY);
  });

  it('is asked again a day later, until the dunning window is over', () => {
    expect(dueNow(refused('active'), LEAD + DAY, POLICY)).toMatchObject({ kind: 'renewal_payment', replaces: null });
    expect(dueNow(refused('payment_failed', { renewal_refused_at: GRACE_END }), GRACE_END + DAY, POLICY)).toMatchObject({ kind: 'renewal_payment' });
    expect(dueNow(refused('payment_failed', { renewal_refused_at: DUNNING_END - 1 }), DUNNING_END, POLICY)).toMatchObject({
      kind: 'lapse',
      event: 'dunning_end_unpaid',
    });
  });

  it("a refused replacement of an expired invoice waits a day too; the open one's period is not held by it", () => {
    const s = sub('past_due', { ...issued(END + DAY), ...renewalRefused({ current_period_end: END }, END + DAY, 'refused') });
    expect(dueNow(s, END + DAY + 60, POLICY).kind).toBe('none');
    expect(dueNow(s, END + 2 * DAY, POLICY)).toMatchObject({ kind: 'renewal_payment', replaces: 'pay_1' });
  });

  it("an NWC wallet's charge is not asked for again within the day either; the grace steps follow on time", () => {
    const s = refused('active', { payment_method: 'nwc', ...renewalRefused({ current_period_end: END }, END, 'refused') });
    expect(dueNow(s, END, POLICY)).toMatchObject({ kind: 'lapse', event: 'period_end_unpaid', renewal_refused: true });
    // The wallet was never asked: its notices do not say it could not pay (review finding).
    expect(dueNow(s, END, POLICY)).not.toHaveProperty('wallet_failed');
    expect(dueNow(s, END, POLICY)).not.toHaveProperty('wallet_retries');
    expect(dueNow(sub('past_due', { payment_method: 'nwc', ...renewalRefused({ current_period_end: END }, END, 'refused') }), END + DAY, POLICY)).toMatchObject(
      {
        kind: 'charge_wallet',
        first: true,
      },
    );
  });

  it("a resume's payment refused is asked again after an hour, its expiry says why; one refused before the pause does not hold it", () => {
    const resumed = { current_period_end: T0 + DAY, pending_since: T0 + 2 * DAY };
    const after = sub('pending', { ...resumed, ...renewalRefused(resumed, T0 + 2 * DAY + 1, 'refused') });
    expect(dueNow(after, T0 + 2 * DAY + 121, POLICY).kind).toBe('none');
    // Asked again after an hour, not a day: the resume has 24 hours (review finding); the stored due time says so.
    expect(nextDueAt(after, T0 + 2 * DAY + 121, POLICY)).toBe(T0 + 2 * DAY + 1 + 3600);
    expect(dueNow(after, T0 + 2 * DAY + 1 + 3600, POLICY).kind).toBe('resume_payment');
    expect(dueNow(after, T0 + 3 * DAY, POLICY)).toMatchObject({ kind: 'lapse', event: 'pending_timeout', renewal_refused: true });
    const before = sub('pending', { ...resumed, ...renewalRefused(resumed, T0 + DAY - 10, 'refused') });
    expect(dueNow(before, T0 + 2 * DAY + 120, POLICY).kind).toBe('resume_payment');
    // Nor is it said to the subscriber (the portal's renewal_refused), nor at the expiry (review finding).
    expect(noRenewalInvoice(before, T0 + 2 * DAY + 60)).toBe(false);
    expect(noRenewalInvoice(after, T0 + 2 * DAY + 60)).toBe(true);
    expect(dueNow(before, T0 + 3 * DAY, POLICY)).not.toHaveProperty('renewal_refused');
  });

  it('a refused replacement sends no last call with the expired invoice; the end says no invoice was made (review finding)', () => {
    // Monthly: issued 3 days ahead, its invoice ended after a day, the replacement refused two days ahead.
    const s = sub('active', { ...issued(LEAD + DAY), ...renewalRefused({ current_period_end: END }, END - 2 * DAY + 60, 'refused') });
    expect(dueNow(s, END - DAY, POLICY).kind).toBe('none');
    expect(nextDueAt(s, END - DAY, POLICY)).toBe(END - DAY + 60);
    expect(dueNow(s, END - DAY + 60, POLICY)).toMatchObject({ kind: 'renewal_payment', replaces: 'pay_1', last_call: true });
    // Refused again: the end lapses it, said as a renewal with no invoice.
    const again = { ...s, ...renewalRefused(s, END - DAY + 60, 'refused') };
    expect(dueNow(again, END, POLICY)).toMatchObject({ kind: 'lapse', event: 'period_end_unpaid', renewal_refused: true });
    // At the end of the dunning window, too.
    const failed = sub('payment_failed', { ...issued(DUNNING_END - DAY), ...renewalRefused({ current_period_end: END }, DUNNING_END - 60, 'refused') });
    expect(dueNow(failed, DUNNING_END, POLICY)).toMatchObject({ kind: 'lapse', event: 'dunning_end_unpaid', renewal_refused: true });
  });

  it('a refusal left behind while an invoice of the period is payable (made by a replica that could not clear it) says nothing', () => {
    const s = sub('active', { ...issued(END + DAY), ...renewalRefused({ current_period_end: END }, LEAD - 60, 'refused') });
    expect(dueNow(s, END, POLICY)).toMatchObject({ kind: 'lapse', event: 'period_end_unpaid' });
    expect(dueNow(s, END, POLICY)).not.toHaveProperty('renewal_refused');
    // Nor does it hold back the last call of the payable invoice (review finding).
    const fresh = sub('active', { ...issued(END + DAY), ...renewalRefused({ current_period_end: END }, END - DAY - 10, 'refused') });
    expect(dueNow(fresh, END - DAY, POLICY)).toMatchObject({ kind: 'last_call' });
  });

  it('nextDueAt finds the first time something is due after a refusal (the stored due time the scheduler loads by)', () => {
    const resumed = { current_period_end: T0 + DAY, pending_since: T0 + 2 * DAY };
    const rows: [string, Row, number][] = [
      ['active, refused at the lead time', refused('active'), LEAD],
      [
        'past_due, refused a replacement',
        sub('past_due', { ...issued(END + DAY), ...renewalRefused({ current_period_end: END }, END + DAY, 'refused') }),
        END + DAY,
      ],
      ['nwc, refused at the end', refused('active', { payment_method: 'nwc', ...renewalRefused({ current_period_end: END }, END, 'refused') }), END],
      ['resumed, refused', sub('pending', { ...resumed, ...renewalRefused(resumed, T0 + 2 * DAY + 1, 'refused') }), T0 + 2 * DAY + 1],
    ];
    for (const [name, row, from] of rows) {
      const next = nextDueAt(row, from + 1, POLICY);
      expect(next, name).not.toBeNull();
      expect(dueNow(row, next!, POLICY).kind, name).not.toBe('none');
      for (let t = from + 1; t < next!; t += 300) expect(dueNow(row, t, POLICY).kind, `${name} at ${t - from}`).toBe('none');
    }
  });

  it('a refusal for another period, or one a renewal payment was made after, holds nothing', () => {
    expect(dueNow(sub('active', renewalRefused({ current_period_end: END - 30 * DAY }, LEAD, 'refused')), LEAD + 60, POLICY).kind).toBe('renewal_payment');
    expect(dueNow(refused('active', { ...issued(END + DAY), ...renewalMade }), END, POLICY)).toMatchObject({ kind: 'lapse' });
    expect(dueNow(refused('active', { ...issued(END + DAY), ...renewalMade }), END, POLICY)).not.toHaveProperty('renewal_refused');
  });
});

describe('walletGone: an NWC wallet gone when asked to pay, the renewal sent as an invoice', () => {
  it('its reminder is the last call: the replacements after it reach the subscriber weekly, not a day later (found from outside)', () => {
    // Grace 2 days; the third failure (a day after the 1-hour retry) deactivates the wallet.
    const at = END + DAY + 3600 + 120;
    const charged = sub('past_due', {
      payment_method: 'nwc',
      grace_period_days: 2,
      ...issued(at + DAY, { reminder_notified_at: null }),
      nwc_next_attempt_at: at + DAY,
      nwc_charging_since: at,
    });
    const gone = { ...charged, ...walletGone(charged, at) };
    expect(gone).toMatchObject({ nwc_fallback: true, nwc_next_attempt_at: null, nwc_charging_since: null, reminder_notified_at: at, reminded_for: END });
    // Its invoice expires a day later, as the grace ends: the lapse first, then replaced, the subscriber not told again.
    expect(dueNow(gone, at + DAY, POLICY)).toMatchObject({ kind: 'lapse', event: 'grace_end_unpaid' });
    expect(dueNow({ ...gone, status: 'payment_failed' }, at + DAY, POLICY)).toMatchObject({
      kind: 'renewal_payment',
      replaces: 'pay_1',
      notify_subscriber: false,
    });
    expect(dueNow({ ...gone, status: 'payment_failed', renewal_expires_at: at + 7 * DAY }, at + 7 * DAY, POLICY)).toMatchObject({
      kind: 'renewal_payment',
      notify_subscriber: true,
    });
    // A subscriber without reminders was not sent it, and still has none counted.
    expect(walletGone({ ...charged, receive_reminders: false }, at)).toMatchObject({ reminder_notified_at: null, reminded_for: END });
  });
});

describe('renewalPeriod: what a renewal payment pays for, as reminders and dunning notices say it', () => {
  const NEXT_END = periodEnd(T0, 2, 'monthly');
  it('paid in time (active, past_due): the next period, from the current end; the same as when it is paid', () => {
    for (const [status, at] of [
      ['active', END - 3 * DAY],
      ['past_due', END + DAY],
    ] as const) {
      expect(renewalPeriod(sub(status), at)).toEqual({ start: END, end: NEXT_END });
      const paid = transition(sub(status), { type: 'renewal_payment', paid_at: at + 3600 }, at + 3600).next;
      expect([paid.current_period_start, paid.current_period_end]).toEqual([END, NEXT_END]);
    }
  });
  it('access ended (payment_failed) or resumed after its period (pending): a new period from the payment', () => {
    const at = END + 5 * DAY;
    expect(renewalPeriod(sub('payment_failed'), at)).toEqual({ start: at, end: periodEnd(at, 1, 'monthly') });
    expect(renewalPeriod(sub('pending', { pending_since: at }), at)).toEqual({ start: at, end: periodEnd(at, 1, 'monthly') });
  });
  it('a trial: the first paid period, from its end; nothing while paused or ended', () => {
    const trial = startSubscription({ interval: 'weekly', trial_days: 14, grace_period_days: 0 }, T0);
    expect(renewalPeriod(trial, T0 + 13 * DAY)).toEqual({ start: T0 + 14 * DAY, end: T0 + 21 * DAY });
    for (const status of ['paused', 'cancelled'] as const) expect(renewalPeriod(sub(status), END - DAY)).toBeNull();
  });
  it('its terms: from the current end only if paid by the end of grace (later it starts at the payment); from the payment, no dates', () => {
    // A reminder sent before the end, paid after the grace (payment_failed), buys a period from the payment,
    // not the one the reminder dated (found from outside: notices promised dates a late payment does not get).
    const graceOver = END + 3 * DAY;
    for (const status of ['active', 'past_due'] as const)
      expect(renewalTerms(sub(status), END - DAY, POLICY)).toEqual({ start: END, end: periodEnd(T0, 2, 'monthly'), if_paid_by: graceOver });
    const late = transition(sub('payment_failed'), { type: 'renewal_payment', paid_at: graceOver + DAY }, graceOver + DAY).next;
    expect(late.current_period_start).toBe(graceOver + DAY);
    const at = END + 5 * DAY;
    expect(renewalTerms(sub('payment_failed'), at, POLICY)).toEqual({ start: at, end: periodEnd(at, 1, 'monthly'), from_payment: true });
    expect(renewalTerms(sub('pending', { pending_since: at }), at, POLICY)).toMatchObject({ from_payment: true });
    expect(renewalTerms(sub('paused'), END - DAY, POLICY)).toBeNull();
    // payment_failed, extended past now (review finding): from the payment, to the end the granted days fix.
    // Its dunning window stays where it was (END + 3 + 14 days): the fixed end holds for any payment still
    // possible, and none is after the window (found from outside: a reminder said "if paid by" the new end).
    const extended = transition(sub('payment_failed'), { type: 'extend', days: 30 }, at).next;
    expect(extended.current_period_end).toBe(END + 30 * DAY);
    const fixedEnd = transition(extended, { type: 'renewal_payment', paid_at: at + 10 * DAY }, at + 10 * DAY).next.current_period_end;
    expect(renewalTerms(extended, at, POLICY)).toEqual({ start: at, end: fixedEnd, from_payment: true, if_paid_by: graceOver + 14 * DAY });
    // Extended by fewer days than the window has left: the granted end comes first.
    const shortly = transition(sub('payment_failed'), { type: 'extend', days: 10 }, at).next;
    expect(renewalTerms(shortly, at, POLICY)).toMatchObject({ from_payment: true, if_paid_by: END + 10 * DAY });
  });
});

describe('carryOpenRenewal', () => {
  it('moves the renewal issued for the period end along with an extend, and nothing else', () => {
    expect(carryOpenRenewal(sub('past_due', issued(END + DAY)), 5)).toEqual({ renewal_for: END + 5 * DAY });
    expect(carryOpenRenewal(sub('active'), 5)).toEqual({});
    // Active (a trial too) or paused: carried as well, so no second one is issued at the new lead time (found from outside).
    expect(carryOpenRenewal(sub('active', issued(END + DAY)), 60)).toEqual({ renewal_for: END + 60 * DAY });
    expect(carryOpenRenewal(sub('paused', issued(END + DAY)), 60)).toEqual({ renewal_for: END + 60 * DAY });
    expect(carryOpenRenewal(sub('active', { renewal_for: END - 30 * DAY }), 5)).toEqual({});
  });
});

describe('lostRenewal: a renewal payment made for a row that moved before it was saved', () => {
  const now = END - 2 * DAY;
  const lost = { end: END, replaces: null, payment_id: 'pay_lost' };
  it('is linked later while the subscription still wants it under the same key', () => {
    expect(lostRenewal(sub('active'), lost, now)).toEqual({ kind: 'keep' });
    expect(lostRenewal(sub('past_due', { renewal_for: END, renewal_payment_id: 'pay_old' }), { ...lost, replaces: 'pay_old' }, now)).toEqual({ kind: 'keep' });
    // Another replica linked this very payment.
    expect(lostRenewal(sub('paused', { renewal_for: END, renewal_payment_id: 'pay_lost' }), lost, now)).toEqual({ kind: 'keep' });
  });
  it('paused in the same period: withdrawn as the invoice the pause withdrew, so a resume replaces it', () => {
    const what = lostRenewal(sub('paused'), lost, now);
    expect(what).toEqual({
      kind: 'withdraw',
      link: { renewal_payment_id: 'pay_lost', renewal_for: END, renewal_expires_at: now, reminder_notified_at: null },
    });
    const resumed = sub('active', what.kind === 'withdraw' ? (what.link ?? {}) : {});
    expect(dueNow(resumed, now, POLICY)).toMatchObject({ kind: 'renewal_payment', replaces: 'pay_lost' });
  });
  it('anything else: withdrawn, the subscription left as it is', () => {
    // Renewed by a payment meanwhile (another period), cancelled, or given another replacement already.
    expect(lostRenewal(sub('active', { current_period_end: END + 30 * DAY }), lost, now)).toEqual({ kind: 'withdraw', link: null });
    expect(lostRenewal(sub('cancelled'), lost, now)).toEqual({ kind: 'withdraw', link: null });
    expect(lostRenewal(sub('active', { renewal_for: END, renewal_payment_id: 'pay_other' }), lost, now)).toEqual({ kind: 'withdraw', link: null });
    expect(lostRenewal(undefined, lost, now)).toEqual({ kind: 'withdraw', link: null });
  });
});

describe('trialEndData: a reminder is the trial-end notice only while the trial runs', () => {
  it('not on the reminders of a trial that ended unpaid (review finding)', () => {
    const trial = sub('active', { trial_end: END });
    expect(trialEndData(trial, END - DAY)).toEqual({ trial_end: END });
    for (const status of ['past_due', 'payment_failed'] as const) expect(trialEndData(sub(status, { trial_end: END }), END + DAY)).toEqual({});
    expect(trialEndData(sub('active'), END - DAY)).toEqual({});
  });
  it('not on a catch-up reminder made after the trial ended, before a sweep marked it past due', () => {
    expect(trialEndData(sub('active', { trial_end: END }), END)).toEqual({});
    expect(trialEndData(sub('active', { trial_end: END }), END + DAY)).toEqual({});
  });
});
