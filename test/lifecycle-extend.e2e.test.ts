import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';
import { devClock } from './support/clock.js';

/**
 * Extends of subscriptions whose renewal is unpaid (past_due, payment_failed) or paused, through HTTP with
 * the dev clock (found by a probe: a past_due subscription extended into the future got a new renewal
 * invoice every day and a reminder every week until its new end). This file owns its stack: it moves the
 * shared test clock.
 */
const DAY = 86_400;
let stack: Stack;
let admin: ReturnType<typeof client>;
let db: Stack['db'];
const anon = () => client(stack.api);

beforeAll(async () => {
  stack = await startStack({ wallets: 1, env: { SCHEDULER_INTERVAL_MS: '60000', BUS_TIMEOUT_MS: '60000' } });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
  db = stack.db;
});
afterAll(async () => {
  await stack?.stop();
});

const { advanceTo } = devClock(() => admin);
async function sub(id: string) {
  return (await admin.get(`/subscriptions/${id}`)).body;
}
/** A paid weekly subscription with `grace` days of grace: its id and the end of its first period. */
async function paidWeekly(grace: number, email: string) {
  const p = (await admin.post('/plans', { name: 'Extended', amount_sats: 1000, interval: 'weekly', grace_period_days: grace })).body as { id: string };
  const s = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email })).body;
  const paid = await anon().post(`/dev/payments/${s.payment_id}/pay`);
  expect(paid.status).toBe(200);
  const active = await until(
    () => sub(s.subscription_id),
    (x) => x.status === 'active',
  );
  return { id: s.subscription_id as string, end: active.current_period_end as number };
}
/** The subscription's renewal invoices, as the owner lists them. */
async function renewals(id: string) {
  const items = (await admin.get(`/subscriptions/${id}/payments?limit=200`)).body.items as Array<{ id: string; status: string; purpose?: string }>;
  const { rows } = await db.query(`SELECT id FROM payments.payments WHERE subscription_id = $1 AND purpose = 'renewal'`, [id]);
  const ids = new Set(rows.map((r) => r.id));
  return items.filter((x) => ids.has(x.id));
}
/** The renewal reminders of the subscription: the owner's events, and whether the subscriber was sent each. */
async function reminders(id: string) {
  const { rows } = await db.query(
    `SELECT payload->'data' AS d FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = $1 ORDER BY seq`,
    [id],
  );
  return rows.map((r) => r.d as { payment_id: string; notify_subscriber?: boolean });
}
async function events(id: string): Promise<string[]> {
  const { rows } = await db.query(`SELECT payload->>'event' AS e FROM billing.outbox WHERE payload->'data'->>'subscription_id' = $1 ORDER BY seq`, [id]);
  return rows.map((r) => r.e);
}

describe('extend where the renewal is unpaid', () => {
  it('past_due extended past today: renewed like an active one until its new end, not invoiced daily; the grace counts from the new end', async () => {
    const { id, end } = await paidWeekly(5, 'extend-pastdue@example.com');
    await advanceTo(end + 3600);
    expect((await sub(id)).status).toBe('past_due');
    const extended = await admin.post(`/subscriptions/${id}/extend?days=30`);
    expect(extended.body).toMatchObject({ status: 'past_due', current_period_end: end + 30 * DAY, has_access: true });
    const invoiced = (await renewals(id)).length;
    const reminded = (await reminders(id)).length;

    // Ten days on, a sweep each day: nothing is due before the new lead time (a day before the new end).
    for (let day = 1; day <= 10; day++) {
      await advanceTo(end + day * DAY + 7200);
      expect((await sub(id)).status, `day ${day}`).toBe('past_due');
    }
    expect((await renewals(id)).length).toBe(invoiced);
    expect(await reminders(id)).toHaveLength(reminded);

    // At the new lead time: one new invoice, sent to the subscriber as the last call.
    await advanceTo(end + 29 * DAY + 3600);
    // The old invoice's expiry is the payments sweeper's, which may not have run since the clock moved.
    const atLead = await until(
      () => renewals(id),
      (r) => r.filter((x) => x.status === 'pending').length <= 1,
    );
    expect(atLead).toHaveLength(invoiced + 1);
    expect(atLead.filter((x) => x.status === 'pending')).toHaveLength(1);
    const sent = await reminders(id);
    expect(sent).toHaveLength(reminded + 1);
    expect(sent.at(-1)).toMatchObject({ payment_id: atLead.find((x) => x.status === 'pending')!.id, notify_subscriber: true });

    // The grace runs from the new end: payment_failed at its end, not before.
    await advanceTo(end + 35 * DAY - 3600);
    expect((await sub(id)).status).toBe('past_due');
    await advanceTo(end + 35 * DAY + 3600);
    expect(await sub(id)).toMatchObject({ status: 'payment_failed', has_access: false });
  });

  it('payment_failed extended: the days wait for a payment, the dunning window is not moved (expired 14 days after access ended)', async () => {
    const { id, end } = await paidWeekly(0, 'extend-failed-dunning@example.com');
    await advanceTo(end + 3600);
    expect((await sub(id)).status).toBe('payment_failed');
    expect((await admin.post(`/subscriptions/${id}/extend?days=60`)).body).toMatchObject({ status: 'payment_failed', has_access: false });
    await advanceTo(end + 14 * DAY - 3600);
    expect((await sub(id)).status).toBe('payment_failed');
    await advanceTo(end + 14 * DAY + 3600);
    expect((await sub(id)).status).toBe('expired');
    expect((await events(id)).at(-1)).toBe('subscription.expired');
    // Nothing is payable any more.
    expect((await renewals(id)).filter((x) => x.status === 'pending')).toHaveLength(0);
  });

  it('paused while past_due, then extended: nothing is due while paused; resumed, it renews like an active one', async () => {
    const { id, end } = await paidWeekly(5, 'extend-paused@example.com');
    await advanceTo(end + 3600);
    expect((await admin.post(`/subscriptions/${id}/pause`)).body.status).toBe('paused');
    expect((await admin.post(`/subscriptions/${id}/extend?days=30`)).body).toMatchObject({ status: 'paused', has_access: true });
    const invoiced = (await renewals(id)).length;
    const reminded = (await reminders(id)).length;
    for (let day = 1; day <= 5; day++) await advanceTo(end + day * DAY + 7200);
    expect(await sub(id)).toMatchObject({ status: 'paused', has_access: true });
    expect((await renewals(id)).length).toBe(invoiced);
    expect((await renewals(id)).filter((x) => x.status === 'pending')).toHaveLength(0);

    expect((await admin.post(`/subscriptions/${id}/resume`)).body.status).toBe('active');
    for (let day = 6; day <= 10; day++) await advanceTo(end + day * DAY + 7200);
    expect((await renewals(id)).length).toBe(invoiced);
    expect(await reminders(id)).toHaveLength(reminded);
    await advanceTo(end + 29 * DAY + 3600);
    expect((await renewals(id)).filter((x) => x.status === 'pending')).toHaveLength(1);
    expect(await reminders(id)).toHaveLength(reminded + 1);
    await advanceTo(end + 30 * DAY + 3600);
    expect((await sub(id)).status).toBe('past_due');
  });
});
