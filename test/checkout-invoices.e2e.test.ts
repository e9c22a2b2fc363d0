import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';
import { devClock } from './support/clock.js';

/**
 * A checkout waiting for its first payment, under the shortest invoices an operator may set
 * (INVOICE_MAX_EXPIRY_S=60): it runs through many invoices within its 24 hours. Through HTTP with the dev
 * clock, real NATS and PostgreSQL. This file owns its stack (it moves the test clock).
 */
let stack: Stack;
let admin: ReturnType<typeof client>;
const anon = () => client(stack.api);

beforeAll(async () => {
  stack = await startStack({ wallets: 1, env: { INVOICE_MAX_EXPIRY_S: '60', SCHEDULER_INTERVAL_MS: '60000' } });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
});
afterAll(async () => {
  await stack?.stop();
});

const { advance } = devClock(() => admin);

describe('fresh invoices of a checkout', () => {
  it('are given for as long as the checkout lasts, however many ran out before (found from outside: a 409 after 50)', async () => {
    const plan = await admin.post('/plans', { name: 'Short invoices', amount_sats: 1000, interval: 'monthly' });
    expect(plan.status).toBe(201);
    const first = await anon().post('/public/subscribe', { plan_id: plan.body.id, payment_method: 'lightning', email: 'many@example.com' });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    const headers = { 'X-Subscriber-Token': new URL(first.body.manage_url).searchParams.get('token')! };
    const seen = new Set<string>([first.body.payment_id]);
    let last = first.body.payment_id as string;
    for (let i = 0; i < 60; i++) {
      await advance(61);
      // The portal's fresh invoice and the checkout page's (the same e-mail again) alternate: one chain.
      const res =
        i % 2 === 0
          ? await anon().post(`/public/manage/subscription/${first.body.subscription_id}/invoice`, {}, { headers })
          : await anon().post('/public/subscribe', { plan_id: plan.body.id, payment_method: 'lightning', email: 'many@example.com' });
      expect(res.status, `ask ${i + 1}: ${JSON.stringify(res.body)}`).toBeLessThan(300);
      const id = (i % 2 === 0 ? res.body.id : res.body.payment_id) as string;
      expect(seen.has(id), `ask ${i + 1} answered an invoice that ran out`).toBe(false);
      seen.add(id);
      last = id;
    }
    // Asked again before it runs out: the same invoice, not another.
    const again = await anon().post(`/public/manage/subscription/${first.body.subscription_id}/invoice`, {}, { headers });
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(last);
    // Invoices that ran out by time are marked by payments' sweeper, which may still be catching up.
    const byStatus = () =>
      stack.db
        .query(`SELECT status, count(*)::int AS n FROM payments.payments WHERE subscription_id = $1 GROUP BY status ORDER BY status`, [
          first.body.subscription_id,
        ])
        .then((r) => r.rows as { status: string; n: number }[]);
    const rows = await until(byStatus, (r) => r.length === 2 && r[0]!.n === 60, 60_000);
    expect(rows).toEqual([
      { status: 'expired', n: 60 },
      { status: 'pending', n: 1 },
    ]);
    // And it is paid like the first one would have been.
    expect((await anon().post(`/dev/payments/${last}/pay`)).status).toBe(200);
    const active = await until(
      () => admin.get(`/subscriptions/${first.body.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    expect(active.body.status).toBe('active');
  });
});
