import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../scripts/stack.mjs';
import { client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';
import { devClock } from './support/clock.js';
import { expectEventsMatchSchemas } from './support/contract.js';
import { holdUncommitted, someoneWaitsOnLock } from './support/locks.js';

/**
 * The clock-driven life of subscriptions, through HTTP with the dev clock. This file owns its stack: it
 * moves the shared test clock, which every service of the stack follows.
 */
const DAY = 86_400;
let stack: Stack;
let admin: ReturnType<typeof client>;
let db: Stack['db'];
const anon = () => client(stack.api);

beforeAll(async () => {
  // A clock move waits for the sweep it triggers, which can outlast the default bus timeout on a slow machine.
  stack = await startStack({ wallets: 1, env: { SCHEDULER_INTERVAL_MS: '60000', BUS_TIMEOUT_MS: '60000' } });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
  db = stack.db;
});
afterAll(async () => {
  await stack?.stop();
});

const { now, advance, advanceTo } = devClock(() => admin);
async function sub(id: string) {
  return (await admin.get(`/subscriptions/${id}`)).body;
}
async function plan(body: Record<string, unknown>) {
  return (await admin.post('/plans', { name: 'Clocked', amount_sats: 1000, ...body })).body as { id: string };
}
async function pay(paymentId: string) {
  const res = await anon().post(`/dev/payments/${paymentId}/pay`);
  expect(res.status).toBe(200);
}
async function openRenewal(subId: string) {
  const list = (await admin.get(`/subscriptions/${subId}/payments`)).body.items as Array<{ id: string; status: string }>;
  return list.find((p) => p.status === 'pending' || p.status === 'expired');
}
async function events(subId: string): Promise<string[]> {
  const { rows } = await db.query(`SELECT payload->>'event' AS e FROM billing.outbox WHERE payload->'data'->>'subscription_id' = $1 ORDER BY seq`, [subId]);
  return rows.map((r) => r.e);
}

describe('renewals', () => {
  it('trial -> renewal payment with reminder -> paid -> renewed, the new period continuing from the trial end', async () => {
    const p = await plan({ interval: 'weekly', trial_days: 7 });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'trial@example.com' })).body;
    const start = await sub(s.subscription_id);
    await advanceTo(start.trial_end - DAY / 2);
    const renewal = await openRenewal(s.subscription_id);
    expect(renewal?.status).toBe('pending');
    expect(await events(s.subscription_id)).toEqual(['subscription.created', 'renewal.reminder', 'subscription.trial_ending']);
    await pay(renewal!.id);
    const renewed = await until(
      () => sub(s.subscription_id),
      (x) => x.current_period_start === start.trial_end,
    );
    expect(renewed).toMatchObject({ status: 'active', current_period_start: start.trial_end, current_period_end: start.trial_end + 7 * DAY, has_access: true });
    // The payment names the period it paid for (its receipt does).
    const paid = await until(
      async () => (await admin.get(`/payments/${renewal!.id}`)).body,
      (b) => b.period_start !== undefined,
    );
    expect(paid).toMatchObject({ status: 'paid', period_start: start.trial_end, period_end: start.trial_end + 7 * DAY });
    await advanceTo(start.trial_end + DAY);
    expect((await sub(s.subscription_id)).status).toBe('active');
    expect((await events(s.subscription_id)).at(-1)).toBe('subscription.renewed');
  });

  it('a year of monthly renewals from 31 January lands on the last day of each month', async () => {
    const t = new Date((await now()) * 1000);
    const jan31 = Date.UTC(t.getUTCFullYear() + 1, 0, 31, 12, 0, 0) / 1000;
    await advanceTo(jan31);
    const p = await plan({ interval: 'monthly' });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'year@example.com' })).body;
    await pay(s.payment_id);
    let cur = await until(
      () => sub(s.subscription_id),
      (x) => x.status === 'active',
    );
    const ends: string[] = [];
    for (let month = 0; month < 12; month++) {
      ends.push(new Date(cur.current_period_end * 1000).toISOString().slice(0, 10));
      await advanceTo(cur.current_period_end - 2 * DAY);
      const renewal = await openRenewal(s.subscription_id);
      expect(renewal, `renewal ${month + 1}`).toBeDefined();
      await pay(renewal!.id);
      const prevEnd = cur.current_period_end;
      cur = await until(
        () => sub(s.subscription_id),
        (x) => x.current_period_start === prevEnd,
      );
      expect(cur.status).toBe('active');
    }
    const y = t.getUTCFullYear() + 1;
    const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
    expect(ends).toEqual([
      `${y}-02-${leap ? 29 : 28}`,
      `${y}-03-31`,
      `${y}-04-30`,
      `${y}-05-31`,
      `${y}-06-30`,
      `${y}-07-31`,
      `${y}-08-31`,
      `${y}-09-30`,
      `${y}-10-31`,
      `${y}-11-30`,
      `${y}-12-31`,
      `${y + 1}-01-31`,
    ]);
    const paidRenewals = await db.query(
      `SELECT count(*)::int AS n FROM payments.payments WHERE subscription_id = $1 AND purpose = 'renewal' AND status = 'paid'`,
      [s.subscription_id],
    );
    expect(paidRenewals.rows[0].n).toBe(12);
  }, 300_000);
});

describe('unpaid renewals', () => {
  it('with grace: past_due (access kept) then payment_failed (access ends); paying later starts a new period', async () => {
    const p = await plan({ interval: 'monthly', trial_days: 3, grace_period_days: 2 });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'grace@example.com' })).body;
    const start = await sub(s.subscription_id);
    await advanceTo(start.current_period_end + 60);
    expect(await sub(s.subscription_id)).toMatchObject({ status: 'past_due', has_access: true });
    await advanceTo(start.current_period_end + 2 * DAY + 60);
    expect(await sub(s.subscription_id)).toMatchObject({ status: 'payment_failed', has_access: false });
    // No sweep between the checkout and the end (one clock move): past_due first, then the first invoice
    // made for that state, no trial "ending" after its end (found from outside: the invoice's reminder
    // went first, saying the state and terms of a moment the sweep had already left). It (a day's life)
    // expired during grace: a new one goes out once it is payment_failed, so that it says what paying now
    // buys (found from outside: made before, it said the old period).
    expect(await events(s.subscription_id)).toEqual([
      'subscription.created',
      'subscription.past_due',
      'renewal.reminder',
      'subscription.payment_failed',
      'renewal.reminder',
    ]);
    const late = await openRenewal(s.subscription_id);
    await pay(late!.id);
    const back = await until(
      () => sub(s.subscription_id),
      (x) => x.status === 'active',
    );
    const paidAt = (await admin.get(`/payments/${late!.id}`)).body.paid_at;
    expect(back.current_period_start).toBe(paidAt);
  });

  it('without grace: straight to payment_failed at period end', async () => {
    const p = await plan({ interval: 'weekly', trial_days: 1 });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'nograce@example.com' })).body;
    const start = await sub(s.subscription_id);
    await advanceTo(start.current_period_end + 1);
    expect(await sub(s.subscription_id)).toMatchObject({ status: 'payment_failed', has_access: false });
    expect(await events(s.subscription_id)).not.toContain('subscription.past_due');
  });

  it('the scheduler away a month past the period end: an invoice and 14 days to pay it, not expired untold (found from outside)', async () => {
    const p = await plan({ interval: 'monthly', trial_days: 7, grace_period_days: 2 });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'away-a-month@example.com' })).body;
    const start = await sub(s.subscription_id);
    // One move from before the renewal's lead time to a month past the end: no sweep in between.
    const back = start.current_period_end + 30 * DAY;
    await advanceTo(back);
    // The sweeps after it (one step each): past_due, payment_failed, then the invoice.
    const failed = await until(
      async () => {
        await advance(60);
        return { s: await sub(s.subscription_id), open: await openRenewal(s.subscription_id) };
      },
      (x) => x.s.status !== 'active' && x.s.status !== 'past_due' && x.open?.status === 'pending',
    );
    // Before: expired at the next sweep, no renewal payment ever made.
    expect(failed.s).toMatchObject({ status: 'payment_failed', has_access: false });
    expect(await events(s.subscription_id)).toEqual(['subscription.created', 'subscription.past_due', 'subscription.payment_failed', 'renewal.reminder']);
    // Payable for the 14 days of the dunning window from then, expired after it.
    await advanceTo(back + 13 * DAY);
    expect((await sub(s.subscription_id)).status).toBe('payment_failed');
    await advanceTo(back + 14 * DAY + 3600);
    expect((await sub(s.subscription_id)).status).toBe('expired');
  });

  it('the scheduler away past the grace, within the dunning window: the lapse first, then an invoice whose reminder says dates still ahead (found from outside)', async () => {
    const p = await plan({ interval: 'monthly', trial_days: 7, grace_period_days: 2 });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'away-five-days@example.com' })).body;
    const start = await sub(s.subscription_id);
    // One move from before the renewal's lead time to five days past the end: no sweep in between.
    const back = start.current_period_end + 5 * DAY;
    await advanceTo(back);
    const failed = await until(
      async () => ({ s: await sub(s.subscription_id), open: await openRenewal(s.subscription_id) }),
      (x) => x.s.status === 'payment_failed' && x.open?.status === 'pending',
    );
    expect(failed.s.has_access).toBe(false);
    // Before: renewal.reminder first (made while still active), then past_due and payment_failed.
    expect(await events(s.subscription_id)).toEqual(['subscription.created', 'subscription.past_due', 'subscription.payment_failed', 'renewal.reminder']);
    const { rows } = await db.query(
      `SELECT payload->'data' AS d, (payload->>'timestamp')::bigint AS at FROM billing.outbox
        WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = $1`,
      [s.subscription_id],
    );
    const [{ d, at }] = rows;
    // Not "if paid by" the end of a grace over for three days: a new period from the payment, payable
    // for the dunning window counted from the late step (14 days), not a trial "ending".
    expect(d).toMatchObject({ status: 'payment_failed', renewal_period_from_payment: true, notify_subscriber: true });
    expect(d.pay_by).toBeGreaterThanOrEqual(back + 14 * DAY);
    expect(d.renewal_period_if_paid_by ?? Number(at) + 1).toBeGreaterThan(Number(at));
    expect(d.trial_end).toBeUndefined();
    expect(await events(s.subscription_id)).not.toContain('subscription.trial_ending');
    // The dunning notices went ahead of the invoice: they say it follows (review finding: "your portal has
    // a payable invoice" before there was one).
    const { rows: steps } = await db.query(
      `SELECT payload->'data'->'invoice_to_follow' AS f FROM billing.outbox
        WHERE payload->>'event' IN ('subscription.past_due', 'subscription.payment_failed') AND payload->'data'->>'subscription_id' = $1`,
      [s.subscription_id],
    );
    expect(steps.map((r) => r.f)).toEqual([true, true]);
  });

  it('an unpaid checkout expires after 24 h and its payment with it', async () => {
    const p = await plan({ interval: 'monthly' });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'never@example.com' })).body;
    await advance(DAY + 60);
    expect((await sub(s.subscription_id)).status).toBe('expired');
    expect((await anon().get(`/public/payment/${s.payment_id}/status`)).body.status).toBe('expired');
  });
});

describe('renewal invoices expire and are replaced', () => {
  async function renewals(subId: string) {
    const { rows } = await db.query(
      `SELECT id, status, expires_at::bigint AS expires_at FROM payments.payments WHERE subscription_id = $1 AND purpose = 'renewal' ORDER BY created_at, id`,
      [subId],
    );
    return rows.map((r) => ({ id: r.id as string, status: r.status as string, expires_at: Number(r.expires_at) }));
  }
  async function reminders(subId: string) {
    const { rows } = await db.query(
      `SELECT payload->'data' AS d FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = $1 ORDER BY seq`,
      [subId],
    );
    return rows.map((r) => r.d);
  }

  it('a new invoice while the subscription can renew; the expired one paid late still renews once, the open one is withdrawn', async () => {
    const p = await plan({ interval: 'monthly', trial_days: 5, grace_period_days: 3 });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'reissue@example.com' })).body;
    const end = (await sub(s.subscription_id)).current_period_end;

    // Monthly lead time: 3 days. Invoices live at most a day (INVOICE_MAX_EXPIRY_S), the payable window is longer.
    const t1 = await advanceTo(end - 3 * DAY + 60);
    const [first] = await renewals(s.subscription_id);
    expect(first?.status).toBe('pending');
    // A day from its creation, during the sweep of the clock move (t1 is read after that sweep).
    expect(first!.expires_at - t1).toBeGreaterThan(DAY - 30);
    expect(first!.expires_at - t1).toBeLessThanOrEqual(DAY);

    await advanceTo(first!.expires_at + 60);
    const afterExpiry = await until(
      () => renewals(s.subscription_id),
      (r) => r.length === 2 && r[0]!.status === 'expired',
    );
    expect(afterExpiry.map((r) => r.status)).toEqual(['expired', 'pending']);
    const sent = await reminders(s.subscription_id);
    expect(sent).toHaveLength(2);
    // Owners see every replacement; the subscriber heard of the first invoice a day ago (replacements: at most weekly).
    expect(sent[0]).toMatchObject({ payment_id: first!.id, notify_subscriber: true });
    expect(sent[1]).toMatchObject({ payment_id: afterExpiry[1]!.id, replaces_payment_id: first!.id, due_at: end, notify_subscriber: false });
    expect(sent[1].payment_request).toMatch(/^lnbc/);

    // Into the grace period: still replaced when it expires, and the subscription is past_due.
    await advanceTo(end + DAY);
    const inGrace = await until(
      () => renewals(s.subscription_id),
      (r) => r.length === 3 && r[1]!.status === 'expired',
    );
    expect(inGrace.map((r) => r.status)).toEqual(['expired', 'expired', 'pending']);
    expect((await sub(s.subscription_id)).status).toBe('past_due');
    // The last call (a day before the end) was passed in one jump: the past_due notice tells the subscriber
    // what to pay and until when; the invoice replaced after it is not told of again (found from outside:
    // two messages a millisecond apart).
    expect((await reminders(s.subscription_id))[2]).toMatchObject({ payment_id: inGrace[2]!.id, notify_subscriber: false });
    const pastDue = await db.query(
      `SELECT payload->'data'->>'notify_subscriber' AS told FROM billing.outbox WHERE payload->>'event' = 'subscription.past_due' AND payload->'data'->>'subscription_id' = $1`,
      [s.subscription_id],
    );
    expect(pastDue.rows).toEqual([{ told: 'true' }]);

    // The subscriber pays the first, long-expired invoice: the money counts, the period renews once.
    await pay(first!.id);
    const renewed = await until(
      () => sub(s.subscription_id),
      (x) => x.status === 'active',
    );
    expect(renewed).toMatchObject({ status: 'active', current_period_start: end });
    const withdrawn = await until(
      () => renewals(s.subscription_id),
      (r) => r[2]!.status === 'expired',
    );
    expect(withdrawn.map((r) => r.status)).toEqual(['paid', 'expired', 'expired']);

    // Paying a replaced invoice anyway is recorded, but does not renew a second time.
    await pay(inGrace[1]!.id);
    await new Promise((r) => setTimeout(r, 1500));
    expect(await sub(s.subscription_id)).toMatchObject({ status: 'active', current_period_start: end, current_period_end: renewed.current_period_end });
    expect((await events(s.subscription_id)).filter((e) => e === 'subscription.renewed')).toHaveLength(1);
  });

  it('still replaced during payment_failed; none once the dunning window expired the subscription', async () => {
    const p = await plan({ interval: 'weekly', trial_days: 2, grace_period_days: 1 });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'reissue-end@example.com' })).body;
    const end = (await sub(s.subscription_id)).current_period_end;
    await advanceTo(end - DAY + 60);
    // Less than a day after the grace ended: on time, its dunning window from the grace end (a step more
    // than a day late counts it from itself: README, the scheduler away).
    await advanceTo(end + 2 * DAY - 3600);
    expect((await sub(s.subscription_id)).status).toBe('payment_failed');
    const count = (await renewals(s.subscription_id)).length;
    await advanceTo(end + 5 * DAY);
    const during = await renewals(s.subscription_id);
    expect(during.length).toBeGreaterThan(count);
    expect(during.at(-1)!.status).toBe('pending');
    await advanceTo(end + 16 * DAY + 3600);
    expect((await sub(s.subscription_id)).status).toBe('expired');
    const after = await renewals(s.subscription_id);
    expect(after.filter((r) => r.status === 'pending')).toHaveLength(0);
    await advanceTo(end + 20 * DAY);
    expect(await renewals(s.subscription_id)).toHaveLength(after.length);
  });
});

describe('pause and resume around the period end', () => {
  it('resume before the period end: active, no payment; after it: pending with a renewal payment at once', async () => {
    const p = await plan({ interval: 'monthly', trial_days: 10 });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'pause@example.com' })).body;
    const start = await sub(s.subscription_id);
    expect((await admin.post(`/subscriptions/${s.subscription_id}/pause`)).body.status).toBe('paused');
    expect((await admin.post(`/subscriptions/${s.subscription_id}/resume`)).body.status).toBe('active');
    expect((await admin.post(`/subscriptions/${s.subscription_id}/pause`)).body.status).toBe('paused');
    await advanceTo(start.current_period_end + DAY);
    // Paused: no renewal was created and the status did not move.
    expect(await sub(s.subscription_id)).toMatchObject({ status: 'paused', has_access: false, payments: [] });
    const resumed = await admin.post(`/subscriptions/${s.subscription_id}/resume`);
    expect(resumed.body.status).toBe('pending');
    const renewal = await openRenewal(s.subscription_id);
    expect(renewal?.status).toBe('pending');
    await pay(renewal!.id);
    expect(
      (
        await until(
          () => sub(s.subscription_id),
          (x) => x.status === 'active',
        )
      ).status,
    ).toBe('active');
  });
});

describe('replicas', () => {
  it('two billing schedulers renew each subscription once', async () => {
    const second = await startService('billing', stack.env);
    try {
      const p = await plan({ interval: 'weekly', trial_days: 2 });
      const ids: string[] = [];
      for (let i = 0; i < 12; i++)
        ids.push((await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: `r${i}@example.com` })).body.subscription_id);
      const end = (await sub(ids[0]!)).current_period_end;
      await advanceTo(end - DAY / 2);
      // Both replicas sweep (the second on its own timer after the dev clock moved).
      await new Promise((r) => setTimeout(r, 1500));
      await advance(1);
      const { rows } = await db.query(
        `SELECT subscription_id, count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal' GROUP BY 1`,
        [ids],
      );
      expect(rows).toHaveLength(12);
      expect(rows.every((r) => r.n === 1)).toBe(true);
      const reminders = await db.query(
        `SELECT count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = ANY($1)`,
        [ids],
      );
      expect(reminders.rows[0].n).toBe(12);
    } finally {
      await second.stop();
    }
  });
});

describe('crash safety', () => {
  it('billing killed in the middle of a sweep: after a restart every renewal exists once', async () => {
    const p = await plan({ interval: 'weekly', trial_days: 2 });
    const ids: string[] = [];
    for (let i = 0; i < 30; i++)
      ids.push((await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: `k${i}@example.com` })).body.subscription_id);
    const end = (await sub(ids[0]!)).current_period_end;
    const moving = admin.post('/dev/clock', { advance_seconds: end - DAY / 2 - (await now()) });
    await new Promise((r) => setTimeout(r, 400));
    stack.services.billing.child.kill('SIGKILL');
    await moving; // 503 or 200, depending on how far it got
    await stack.restartBilling();
    await advance(1);
    const { rows } = await db.query(
      `SELECT subscription_id, count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal' GROUP BY 1`,
      [ids],
    );
    expect(rows).toHaveLength(30);
    expect(rows.every((r) => r.n === 1)).toBe(true);
    const marked = await db.query(
      `SELECT count(*)::int AS n FROM billing.subscriptions WHERE id = ANY($1) AND renewal_for = current_period_end AND renewal_payment_id IS NOT NULL`,
      [ids],
    );
    expect(marked.rows[0].n).toBe(30);
    const reminders = await db.query(
      `SELECT count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = ANY($1)`,
      [ids],
    );
    expect(reminders.rows[0].n).toBe(30);
  });
});

/**
 * A sweep renews due subscriptions in batches: one payments message for the batch, then one billing
 * transaction. These hold one row of a batch locked (as another writer would) so the batch waits between
 * the two steps, then move that row or kill billing right there.
 */
describe('batched renewals', () => {
  async function dueBatch(n: number, tag: string) {
    const p = await plan({ interval: 'weekly', trial_days: 2 });
    const ids: string[] = [];
    for (let i = 0; i < n; i++)
      ids.push((await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: `${tag}${i}@example.com` })).body.subscription_id);
    return { ids, end: (await sub(ids[0]!)).current_period_end as number };
  }
  /** Holds the row locked in a transaction of its own until released (with what to do to it first). */
  const holdRow = (id: string) => holdUncommitted(db, [['SELECT 1 FROM billing.subscriptions WHERE id = $1 FOR UPDATE', [id]]]);
  async function expectRenewedOnce(ids: string[]) {
    const payments = await db.query(
      `SELECT subscription_id, count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal' GROUP BY 1`,
      [ids],
    );
    expect(payments.rows).toHaveLength(ids.length);
    expect(payments.rows.every((r) => r.n === 1)).toBe(true);
    const marked = await db.query(
      `SELECT count(*)::int AS n FROM billing.subscriptions s JOIN billing.renewal_payments r ON r.payment_id = s.renewal_payment_id
       WHERE s.id = ANY($1) AND s.renewal_for = s.current_period_end AND r.period_end = s.current_period_end`,
      [ids],
    );
    expect(marked.rows[0].n).toBe(ids.length);
    const reminders = await db.query(
      `SELECT payload->'data'->>'subscription_id' AS id, count(*)::int AS n, min(payload->'data'->>'payment_id') AS payment_id FROM billing.outbox
       WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = ANY($1) GROUP BY 1`,
      [ids],
    );
    expect(reminders.rows).toHaveLength(ids.length);
    expect(reminders.rows.every((r) => r.n === 1)).toBe(true);
    const trialEnding = await db.query(
      `SELECT count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'subscription.trial_ending' AND payload->'data'->>'subscription_id' = ANY($1)`,
      [ids],
    );
    expect(trialEnding.rows[0].n).toBe(ids.length);
    return reminders.rows;
  }

  it('a row another writer moves while its batch is between payments and billing is skipped, then renewed once with the same payment', async () => {
    const { ids, end } = await dueBatch(8, 'mv');
    const moved = ids[3]!;
    const held = await holdRow(moved);
    const moving = admin.post('/dev/clock', { advance_seconds: end - DAY / 2 - (await now()) });
    await someoneWaitsOnLock(db);
    // The batch read the row before this change (an owner's edit): its compare-and-set must not overwrite it.
    await held([`UPDATE billing.subscriptions SET metadata = '{"edited":"while renewing"}', version = version + 1 WHERE id = $1`, [moved]]);
    expect((await moving).status).toBe(200);
    const reminders = await expectRenewedOnce(ids);
    const row = (await db.query('SELECT metadata, renewal_payment_id FROM billing.subscriptions WHERE id = $1', [moved])).rows[0];
    expect(row.metadata).toEqual({ edited: 'while renewing' });
    expect(reminders.find((r) => r.id === moved)?.payment_id).toBe(row.renewal_payment_id);
  });

  it('billing killed after payments made a batch and before billing saved it: after a restart every renewal exists once', async () => {
    const { ids, end } = await dueBatch(10, 'kb');
    const held = await holdRow(ids[5]!);
    const moving = admin.post('/dev/clock', { advance_seconds: end - DAY / 2 - (await now()) });
    await someoneWaitsOnLock(db);
    const made = await db.query(`SELECT count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal'`, [ids]);
    expect(made.rows[0].n).toBe(ids.length);
    stack.services.billing.child.kill('SIGKILL');
    await held();
    // Its answer never comes (the gateway gives up after BUS_TIMEOUT_MS); the clock moved all the same.
    moving.catch(() => undefined);
    const unsaved = await db.query('SELECT count(*)::int AS n FROM billing.subscriptions WHERE id = ANY($1) AND renewal_payment_id IS NOT NULL', [ids]);
    expect(unsaved.rows[0].n).toBe(0);
    await stack.restartBilling();
    await advance(1);
    await expectRenewedOnce(ids);
  });
});

/**
 * A sweep makes renewal payments first and links them in billing after: a subscription moved in between
 * (paused, renewed by a payment) must not be left with an invoice nobody was sent. These hold the
 * payments service at the moment it stores the sweep's payments (a row under the same idempotency key,
 * uncommitted, in a transaction of the test's own) while the subscription moves through HTTP.
 */
describe('renewal payments made while the subscription moved', () => {
  async function renewalPayments(subId: string) {
    const { rows } = await db.query(`SELECT id, status FROM payments.payments WHERE subscription_id = $1 AND purpose = 'renewal' ORDER BY created_at, id`, [
      subId,
    ]);
    return rows as { id: string; status: string }[];
  }
  async function activeMonthly(n: number, tag: string) {
    const p = await plan({ interval: 'monthly' });
    const subs: { id: string; checkout: string }[] = [];
    for (let i = 0; i < n; i++) {
      const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: `${tag}${i}@example.com` })).body;
      await pay(s.payment_id);
      subs.push({ id: s.subscription_id, checkout: s.payment_id });
    }
    for (const s of subs)
      await until(
        () => sub(s.id),
        (x) => x.status === 'active',
      );
    return { subs, end: (await sub(subs[0]!.id)).current_period_end as number };
  }
  /** Stores nothing under these keys until released: the payments service waits on them when it stores its own. */
  const holdKeys = (template: string, keys: string[]) =>
    holdUncommitted(
      db,
      keys.map((key, i) => [
        `INSERT INTO payments.payments SELECT (jsonb_populate_record(NULL::payments.payments, to_jsonb(p) || jsonb_build_object(
           'id', $2::text, 'provider_ref', $2::text, 'idempotency_key', $3::text, 'status', 'pending', 'paid_at', NULL, 'purpose', 'renewal'))).*
         FROM payments.payments p WHERE p.id = $1`,
        [template, `pay_hold${i}_${Date.now()}`, key],
      ]),
    );

  it('paused while its renewal payment was being made: the payment is withdrawn, and a resume issues a new one', async () => {
    const { subs, end } = await activeMonthly(3, 'pz');
    const release = await holdKeys(
      subs[0]!.checkout,
      subs.map((s) => `renewal:${s.id}:${end}`),
    );
    // Into the monthly lead time (3 days): the sweep asks payments for all three renewals and waits.
    const moving = admin.post('/dev/clock', { advance_seconds: end - 2 * DAY - (await now()) });
    await someoneWaitsOnLock(db);
    const [a, b, kept] = subs;
    for (const s of [a!, b!]) expect((await admin.post(`/subscriptions/${s.id}/pause`)).body.status).toBe('paused');
    await release();
    expect((await moving).status).toBe(200);

    for (const s of [a!, b!]) {
      expect(await sub(s.id)).toMatchObject({ status: 'paused' });
      const made = await until(
        () => renewalPayments(s.id),
        (r) => r.length === 1 && r[0]!.status !== 'pending',
      );
      expect(made.map((r) => r.status)).toEqual(['expired']);
      expect(await events(s.id)).not.toContain('renewal.reminder');
    }
    // The one left alone was renewed as usual.
    expect((await renewalPayments(kept!.id)).map((r) => r.status)).toEqual(['pending']);
    expect((await events(kept!.id)).filter((e) => e === 'renewal.reminder')).toHaveLength(1);

    // Resumed within the period: a new invoice at once, sent in a reminder (not the withdrawn one again).
    expect((await admin.post(`/subscriptions/${a!.id}/resume`)).body.status).toBe('active');
    const after = await until(
      () => renewalPayments(a!.id),
      (r) => r.length === 2,
    );
    expect(after.map((r) => r.status)).toEqual(['expired', 'pending']);
    const { rows } = await db.query(
      `SELECT payload->'data' AS d FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = $1`,
      [a!.id],
    );
    expect(rows.map((r) => r.d.payment_id)).toEqual([after[1]!.id]);
  });

  it('paused, its withdrawn invoice paid meanwhile (not applied): a resume within the period still issues one that renews (found from outside: none, ever)', async () => {
    const { subs, end } = await activeMonthly(1, 'pwp');
    const s = subs[0]!;
    await advanceTo(end - 2 * DAY);
    const [withdrawn] = await until(
      () => renewalPayments(s.id),
      (r) => r.length === 1 && r[0]!.status === 'pending',
    );
    expect((await admin.post(`/subscriptions/${s.id}/pause`)).body.status).toBe('paused');
    // Paid after the pause took it back: recorded, not applied, for the owner to refund.
    await pay(withdrawn!.id);
    await until(
      async () => (await admin.get(`/payments/${withdrawn!.id}`)).body,
      (b) => b.status === 'paid' && b.unapplied_reason === 'The subscription is paused',
    );
    expect((await admin.post(`/subscriptions/${s.id}/resume`)).body.status).toBe('active');
    const after = await until(
      () => renewalPayments(s.id),
      (r) => r.length === 2,
    );
    expect(after.map((r) => r.status)).toEqual(['paid', 'pending']);
    expect((await admin.get(`/payments?subscription_id=${s.id}&status=pending`)).body.items.map((x: { id: string }) => x.id)).toEqual([after[1]!.id]);
    await pay(after[1]!.id);
    expect(
      await until(
        () => sub(s.id),
        (x) => x.current_period_start === end,
      ),
    ).toMatchObject({ status: 'active', current_period_start: end });
  });

  it('renewed by its paid invoice while a replacement was being made: the replacement is withdrawn', async () => {
    const { subs, end } = await activeMonthly(1, 'rp');
    const s = subs[0]!;
    await advanceTo(end - 3 * DAY + 60);
    const [first] = await renewalPayments(s.id);
    expect(first?.status).toBe('pending');
    const expiresAt = Number((await db.query('SELECT expires_at FROM payments.payments WHERE id = $1', [first!.id])).rows[0].expires_at);
    const release = await holdKeys(s.checkout, [`renewal:${s.id}:${end}:after:${first!.id}`]);
    // Past the first invoice's life: the sweep makes its replacement and waits.
    const moving = admin.post('/dev/clock', { advance_seconds: expiresAt + 60 - (await now()) });
    await someoneWaitsOnLock(db);
    await pay(first!.id);
    await until(
      () => sub(s.id),
      (x) => x.current_period_start === end,
    );
    await release();
    expect((await moving).status).toBe(200);
    const made = await until(
      () => renewalPayments(s.id),
      (r) => r.length === 2 && r[1]!.status !== 'pending',
    );
    expect(made.map((r) => r.status)).toEqual(['paid', 'expired']);
    expect(await sub(s.id)).toMatchObject({ status: 'active', current_period_start: end });
  });

  /**
   * A monthly subscription whose renewal invoice is out, paid while billing's handling of the payment
   * waits on the subscription's row (as it would while billing is away); the row stays held until
   * `release`. Returns the invoice and when it expires.
   */
  async function renewalPaidUnheard(tag: string) {
    const { subs, end } = await activeMonthly(1, tag);
    const s = subs[0]!;
    await advanceTo(end - 3 * DAY + 60);
    const [first] = await renewalPayments(s.id);
    expect(first?.status).toBe('pending');
    const expiresAt = Number((await db.query('SELECT expires_at FROM payments.payments WHERE id = $1', [first!.id])).rows[0].expires_at);
    const release = await holdUncommitted(db, [['SELECT 1 FROM billing.subscriptions WHERE id = $1 FOR UPDATE', [s.id]]]);
    try {
      await pay(first!.id);
      expect(await someoneWaitsOnLock(db)).toBeGreaterThanOrEqual(1);
    } catch (err) {
      await release();
      throw err;
    }
    return { s, end, first: first!, expiresAt, release };
  }

  it('paid while billing has not heard yet, past its expiry: no replacement is made, and the period is paid once (found from outside: paid twice)', async () => {
    const { s, end, expiresAt, release } = await renewalPaidUnheard('late');
    try {
      // Past the invoice's life in billing's view: its sweep would replace the invoice.
      expect((await admin.post('/dev/clock', { advance_seconds: expiresAt + 60 - (await now()) })).status).toBe(200);
      expect((await renewalPayments(s.id)).map((r) => r.status)).toEqual(['paid']);
    } finally {
      await release();
    }
    await until(
      () => sub(s.id),
      (x) => x.current_period_start === end,
    );
    expect(await sub(s.id)).toMatchObject({ status: 'active', current_period_start: end });
    expect((await renewalPayments(s.id)).map((r) => r.status)).toEqual(['paid']);
    const { rows } = await db.query(
      `SELECT count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'payment.unapplied' AND payload->'data'->>'subscription_id' = $1`,
      [s.id],
    );
    expect(rows[0].n).toBe(0);
  });

  it('billing killed while the payment.received of a renewal was in flight, the invoice expiring before JetStream redelivers it: paid once, no second invoice (outage probe)', async () => {
    // Billing takes the event and waits on the row: killed there, it never acknowledges it, and JetStream
    // redelivers it only after its ack wait (30 s).
    const { s, end, first, expiresAt, release } = await renewalPaidUnheard('kill');
    try {
      stack.services.billing.child.kill('SIGKILL');
    } finally {
      await release();
    }
    await stack.restartBilling();
    // Past the invoice's life in billing's view, the event not redelivered yet: the sweep would replace it.
    expect((await admin.post('/dev/clock', { advance_seconds: expiresAt + 60 - (await now()) })).status).toBe(200);
    expect((await renewalPayments(s.id)).map((r) => r.status)).toEqual(['paid']);

    const renewed = await until(
      () => sub(s.id),
      (x) => x.current_period_start === end,
      90_000,
    );
    expect(renewed).toMatchObject({ status: 'active', current_period_start: end });
    expect((await renewalPayments(s.id)).map((r) => r.status)).toEqual(['paid']);
    const sent = await db.query(
      `SELECT payload->>'event' AS e, payload->'data'->>'payment_id' AS payment_id FROM billing.outbox
       WHERE payload->>'event' IN ('renewal.reminder', 'subscription.renewed', 'payment.unapplied') AND payload->'data'->>'subscription_id' = $1 ORDER BY seq`,
      [s.id],
    );
    expect(sent.rows).toEqual([
      { e: 'renewal.reminder', payment_id: first.id },
      { e: 'subscription.renewed', payment_id: first.id },
    ]);
  });
});

describe('events on JetStream', () => {
  it('every transition of a subscription reaches the EVENTS stream once, in order, in the WebhookEvent shape', async () => {
    const p = await plan({ interval: 'weekly' });
    const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'events@example.com', name: 'Eve' })).body;
    await pay(s.payment_id);
    await until(
      () => sub(s.subscription_id),
      (x) => x.status === 'active',
    );
    await admin.post(`/subscriptions/${s.subscription_id}/pause`);
    await admin.post(`/subscriptions/${s.subscription_id}/resume`);
    await admin.post(`/subscriptions/${s.subscription_id}/extend?days=3`);
    await admin.post(`/subscriptions/${s.subscription_id}/cancel`, { immediate: true });
    const nc = await connect({ servers: stack.natsUrl, ...stack.natsOperator });
    try {
      const consumer = await jetstream(nc).consumers.get('EVENTS', { filter_subjects: 'events.>' });
      const seen: any[] = [];
      const end = Date.now() + 15_000;
      while (Date.now() < end && !seen.some((e) => e.event === 'subscription.cancelled')) {
        for await (const m of await consumer.fetch({ max_messages: 500, expires: 1000 })) {
          const e = m.json<any>();
          if (e.data.subscription_id === s.subscription_id) seen.push(e);
        }
      }
      // Each service's events are in order; across the two outboxes only causality orders them (billing
      // activates after it consumed payment.received from this stream).
      const names = seen.map((e) => e.event);
      expect(names.filter((n) => n.startsWith('subscription.'))).toEqual([
        'subscription.created',
        'subscription.activated',
        'subscription.paused',
        'subscription.resumed',
        'subscription.extended',
        'subscription.cancelled',
      ]);
      expect(names.filter((n) => n === 'payment.received')).toHaveLength(1);
      expect(names.indexOf('payment.received')).toBeLessThan(names.indexOf('subscription.activated'));
      expect(names).toHaveLength(7);
      expect(new Set(seen.map((e) => e.id)).size).toBe(seen.length);
      for (const e of seen) {
        expect(e).toMatchObject({ wallet_id: stack.wallets[0]!.id, data: { subscription_id: s.subscription_id, plan_id: p.id, plan_name: 'Clocked' } });
        expect(Number.isInteger(e.timestamp)).toBe(true);
      }
      expect(seen.find((e) => e.event === 'subscription.created').data).toMatchObject({
        subscriber_email: 'events@example.com',
        subscriber_name: 'Eve',
        amount_sats: 1000,
      });
    } finally {
      await nc.close();
    }
  });
});

describe('events', () => {
  it('every event of these lifecycles matches its schema (the OpenAPI webhooks)', async () => {
    const seen = await expectEventsMatchSchemas(stack.db);
    for (const e of [
      'subscription.created',
      'subscription.activated',
      'subscription.renewed',
      'subscription.past_due',
      'renewal.reminder',
      'payment.received',
    ]) {
      expect(seen[e], e).toBeGreaterThan(0);
    }
  });
});
