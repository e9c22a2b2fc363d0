import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, until } from './support/http.js';
import { spawnStart, type StartedStack, untilReady } from './support/start.js';

/**
 * The README's first command on a fresh machine: `npm start` without DATABASE_URL runs on the embedded
 * PGlite, which serves every service's connections on its one session. The walkthrough runs there several
 * times over, so the statements each process repeats (and would prepare under a name of its own) meet.
 */
let stack: StartedStack;
let data: string;
let api: string;
let admin: string;

beforeAll(async () => {
  data = mkdtempSync(join(tmpdir(), 'sb-embedded-'));
  stack = await spawnStart({ DATABASE_URL: '', NATS_URL: '', DB_PREPARED_STATEMENTS: '', SB_DATA_DIR: data });
  await untilReady(stack);
  const out = stack.lines.join('\n');
  admin = /admin key:\s+([0-9a-f]{64})/.exec(out)?.[1] ?? '';
  expect(admin, out).toMatch(/^[0-9a-f]{64}$/);
  api = `http://127.0.0.1:${stack.ports.PORT}/subscriptions_manager/api/v1`;
}, 180_000);

afterAll(async () => {
  const child = stack?.child;
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await Promise.race([stack.exited, new Promise((r) => setTimeout(r, 20_000))]);
    if (child.exitCode === null) child.kill('SIGKILL');
  }
  if (data) rmSync(data, { recursive: true, force: true });
});

describe('npm start on the embedded database', () => {
  it('runs the walkthrough over and over: plans, checkouts, payments, a renewal', async () => {
    const owner = client(api, admin);
    const pub = client(api);
    const subs: { sub: string; pay: string }[] = [];
    // Five rounds: every statement on the way runs more often than a process takes to name it.
    for (let i = 0; i < 5; i++) {
      const plan = await owner.post('/plans', { name: `Gold ${i}`, amount_sats: 21_000 + i, interval: 'monthly' });
      expect(plan.status, JSON.stringify(plan.body)).toBe(201);
      const shown = await pub.get(`/public/plan/${plan.body.id}`);
      expect(shown.status).toBe(200);
      expect(shown.body.amount_sats).toBe(21_000 + i);
      const checkout = await pub.post('/public/subscribe', {
        plan_id: plan.body.id,
        payment_method: 'lightning',
        email: `alice${i}@example.com`,
      });
      expect(checkout.status, JSON.stringify(checkout.body)).toBe(201);
      const paid = await pub.post(`/dev/payments/${checkout.body.payment_id}/pay`);
      expect(paid.status, JSON.stringify(paid.body)).toBe(200);
      subs.push({ sub: checkout.body.subscription_id, pay: checkout.body.payment_id });
    }
    for (const { sub } of subs) {
      const s = await until(
        () => owner.get(`/subscriptions/${sub}`),
        (r) => r.body?.status === 'active',
      );
      expect(s.body.status, JSON.stringify(s.body)).toBe('active');
    }
    // 29 days on: each subscription has its renewal payment.
    const moved = await owner.post('/dev/clock', { advance_seconds: 2_505_600 });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    for (const { sub } of subs) {
      const pending = await until(
        () => owner.get(`/payments?subscription_id=${sub}&status=pending`),
        (r) => r.body?.items?.length === 1,
        30_000,
      );
      expect(pending.body.items, JSON.stringify(pending.body)).toHaveLength(1);
    }
    expect(stack.lines.filter((l) => /already exists|does not exist/.test(l))).toEqual([]);
  });
});
