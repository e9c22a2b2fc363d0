import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_PREFIX, freePort, startService } from '../scripts/stack.mjs';
import { timedCall, type TimedAnswer, until } from './support/http.js';
import { startPgCluster, type PgCluster } from './support/pg-cluster.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * The database stops abruptly (`pg_ctl stop -m immediate`, a private server of this file's own) under
 * load and in the middle of a renewal sweep, for 15 s: no process ends, clients get 503 with
 * Retry-After (never a 500, never a hang past the bus timeout), everything is ready within 5 s of the
 * database's return, and nothing is lost or doubled.
 */
const BUS_TIMEOUT_MS = 5000;
const OUTAGE_MS = 15_000;
const DAY = 86_400;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: PgCluster;
let stack: Stack;
let admin: string;

beforeAll(async () => {
  cluster = await startPgCluster();
  // Private webhook URLs: the notifier's test sends to a receiver on loopback.
  stack = await startStack({ adminUrl: cluster.adminUrl, wallets: 1, env: { BUS_TIMEOUT_MS: String(BUS_TIMEOUT_MS), WEBHOOK_ALLOW_PRIVATE: '1' } });
  admin = stack.wallets[0]!.admin_key;
});
/** Processes a test started besides the stack, stopped even when it fails. */
const extras: Array<{ stop(): Promise<void> }> = [];
afterAll(async () => {
  await Promise.allSettled(extras.map((e) => e.stop()));
  await stack?.stop();
  await cluster?.destroy();
});

interface Rec extends TimedAnswer {
  what: string;
}
const records: Rec[] = [];

/** One HTTP call, recorded; status 0 is no answer at all (connection failure or a minute without one). */
async function req(what: string, method: string, path: string, o: { key?: string; body?: unknown; base?: string } = {}): Promise<Rec> {
  const rec = { what, ...(await timedCall(o.base ?? stack.api, method, path, o)) };
  records.push(rec);
  return rec;
}

const opsUrls = () => Object.values(stack.services).map((s) => s.url);
const status = (url: string) =>
  fetch(url, { signal: AbortSignal.timeout(10_000) }).then(
    (r) => r.status,
    () => 0,
  );

/**
 * Every service process still runs (none exited, none was killed), and no database error got as far as
 * the process-wide last resort (each was handled where it happened).
 */
function expectAllAlive(extra: Array<{ name: string; lines: string[]; child: { exitCode: number | null; signalCode: string | null } }> = []): void {
  for (const s of [...Object.values(stack.services), ...extra]) {
    expect({ exit: s.child.exitCode, signal: s.child.signalCode }, s.name).toEqual({ exit: null, signal: null });
    expect(
      s.lines.filter((l) => /(unhandled|uncaught) (database error|rejection|exception)/.test(l)),
      s.name,
    ).toEqual([]);
  }
}

/** Starts the database again and measures how long until every /readyz is 200. */
async function restoreAndTimeReadiness(): Promise<number> {
  await cluster.start();
  const back = Date.now();
  await until(
    async () => Promise.all(opsUrls().map((u) => status(`${u}/readyz`))),
    (s) => s.every((x) => x === 200),
    30_000,
  );
  return Date.now() - back;
}

describe('database outage under load', () => {
  it('no process exits, clients get 503 with Retry-After, all ready within 5 s, nothing lost or doubled', async () => {
    const plan = await req('plan', 'POST', '/plans', { key: admin, body: { name: 'Outage', amount_sats: 1000, interval: 'monthly' } });
    expect(plan.status).toBe(201);
    const planId = plan.body.id as string;

    // Bounded load: four clients each subscribing, paying and reading, one request at a time.
    let loading = true;
    const paid = new Set<string>();
    const unsure = new Set<string>();
    const worker = async (w: number) => {
      for (let n = 0; loading; n++) {
        const sub = await req('subscribe', 'POST', '/public/subscribe', {
          body: { plan_id: planId, payment_method: 'lightning', email: `load${w}-${n}@example.com` },
        });
        if (sub.status === 201) {
          const pay = await req('pay', 'POST', `/dev/payments/${sub.body.payment_id}/pay`);
          (pay.status === 200 ? paid : unsure).add(sub.body.payment_id);
          await req('payment status', 'GET', `/public/payment/${sub.body.payment_id}/status`);
        }
        await req('plans', 'GET', '/plans', { key: admin });
        await req('subscriptions', 'GET', '/subscriptions?limit=5', { key: admin });
        await req('webhook endpoints', 'GET', '/webhook-endpoints', { key: admin });
        await req('public plan', 'GET', `/public/plan/${planId}`);
        await sleep(50);
      }
    };
    const workers = [0, 1, 2, 3].map(worker);
    // Checkouts to be paid while the database is down (dev payments: 503, paid after).
    const held: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await req('subscribe', 'POST', '/public/subscribe', { body: { plan_id: planId, payment_method: 'lightning', email: `held${i}@example.com` } });
      expect(r.status).toBe(201);
      held.push(r.body.payment_id);
    }
    await sleep(3000);

    // A checkout caught by the outage after its subscription was saved and before its payment was:
    // the payments table is held locked so its payment waits, then the database stops.
    const locker = new pg.Client({ connectionString: stack.databaseUrl });
    locker.on('error', () => undefined);
    await locker.connect();
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE payments.payments IN ACCESS EXCLUSIVE MODE');
    const caught = req('subscribe', 'POST', '/public/subscribe', { body: { plan_id: planId, payment_method: 'lightning', email: 'caught@example.com' } });
    const saved = await until(
      async () =>
        (
          await stack.db.query(
            `SELECT s.id FROM billing.subscriptions s JOIN billing.subscribers c ON c.id = s.subscriber_id WHERE c.email = 'caught@example.com'`,
          )
        ).rows,
      (rows) => rows.length === 1,
      10_000,
    );
    expect(saved).toHaveLength(1);
    await sleep(300);

    await cluster.crash();
    const down = Date.now();
    expect((await caught).status).toBe(503);
    await locker.end().catch(() => undefined);

    // While it is down: alive, not ready; a gateway and a notifier started now wait for it.
    const [gwPort, notifierPort] = [await freePort(), await freePort()];
    const lateGateway = await startService('gateway', stack.env, { port: gwPort, waitReady: false });
    const lateNotifier = await startService('notifier', stack.env, { port: notifierPort, waitReady: false });
    const late = [lateGateway, lateNotifier];
    extras.push(...late);
    await until(
      () => Promise.all(late.map((s) => status(`${s.url}/healthz`))),
      (s) => s.every((x) => x === 200),
      30_000,
    );
    await sleep(Math.max(0, OUTAGE_MS / 2 - (Date.now() - down)));
    for (const url of [...opsUrls(), ...late.map((s) => s.url)]) {
      expect(await status(`${url}/healthz`), url).toBe(200);
      expect(await status(`${url}/readyz`), url).toBe(503);
    }
    // Kubernetes' readiness of the gateway: a gateway that never migrated is not (found in review: it was
    // /healthz, so a rollout went on to gateways that could serve nothing); one that did stays ready.
    expect(await status(`${lateGateway.url}/startedz`)).toBe(503);
    expect(await status(`${stack.gatewayUrl}/startedz`)).toBe(200);
    for (const id of held) {
      const r = await req('pay', 'POST', `/dev/payments/${id}/pay`);
      expect(r.status).toBe(503);
      expect(r.retryAfter).toBeTruthy();
    }
    const lateApi = await req('late gateway', 'GET', '/plans', { key: admin, base: `${lateGateway.url}${API_PREFIX}` });
    expect(lateApi.status).toBe(503);
    expect(lateApi.retryAfter).toBeTruthy();

    await sleep(Math.max(0, OUTAGE_MS - (Date.now() - down)));
    const upAgainAt = Date.now();
    const readyAfter = await restoreAndTimeReadiness();
    expect(readyAfter).toBeLessThanOrEqual(5000);
    await until(
      () => Promise.all(late.map((s) => status(`${s.url}/readyz`))),
      (s) => s.every((x) => x === 200),
      20_000,
    );
    expect(await status(`${lateGateway.url}/readyz`)).toBe(200);
    expect(await status(`${lateNotifier.url}/readyz`)).toBe(200);
    expect((await req('late gateway', 'GET', '/plans', { key: admin, base: `${lateGateway.url}${API_PREFIX}` })).status).toBe(200);
    const recovered = Date.now();
    await sleep(5000);
    loading = false;
    await Promise.all(workers);

    expectAllAlive(late);
    await Promise.all(late.map((s) => s.stop()));

    // No 500, no request without an answer, none waiting past the bus timeout.
    expect(
      records.filter((r) => r.status === 0 || (r.status >= 500 && r.status !== 503)).map((r) => `${r.what} ${r.status} ${JSON.stringify(r.body)}`),
    ).toEqual([]);
    const slow = records.filter((r) => r.end - r.start > BUS_TIMEOUT_MS + 2000);
    expect(slow.map((r) => `${r.what} ${r.end - r.start} ms`)).toEqual([]);
    // Everything asked while the database was down is a 503 with a retry hint.
    const during = records.filter((r) => r.start >= down && r.end <= upAgainAt);
    expect(during.length).toBeGreaterThan(20);
    expect(during.filter((r) => r.status !== 503).map((r) => `${r.what} ${r.status}`)).toEqual([]);
    expect(during.filter((r) => !r.retryAfter)).toEqual([]);
    // Every kind of request met the outage (billing, payments, notifier and gateway paths).
    expect([...new Set(during.map((r) => r.what))]).toEqual(
      expect.arrayContaining(['subscribe', 'pay', 'plans', 'subscriptions', 'webhook endpoints', 'public plan', 'late gateway']),
    );
    // The load went on before and after.
    expect(records.some((r) => r.end < down && r.what === 'pay' && r.status === 200)).toBe(true);
    expect(records.some((r) => r.start > recovered && r.what === 'pay' && r.status === 200)).toBe(true);

    // The caught checkout is taken up again by the contact's retry: same subscription, a payment now.
    const retry = await req('subscribe', 'POST', '/public/subscribe', { body: { plan_id: planId, payment_method: 'lightning', email: 'caught@example.com' } });
    expect(retry.status).toBe(201);
    expect(retry.body.subscription_id).toBe(saved[0]!.id);
    expect((await req('pay', 'POST', `/dev/payments/${retry.body.payment_id}/pay`)).status).toBe(200);
    paid.add(retry.body.payment_id);

    for (const id of held) {
      expect((await req('pay', 'POST', `/dev/payments/${id}/pay`)).status).toBe(200);
      paid.add(id);
    }
    // Payments whose pay answer was lost: paid now (or found paid already).
    for (const id of unsure) {
      const r = await req('pay', 'POST', `/dev/payments/${id}/pay`);
      expect([200, 409]).toContain(r.status);
      if (r.status === 200) paid.add(id);
    }

    // Every paid payment applied exactly once, its subscription active.
    const wallet = stack.wallets[0]!.id;
    const applied = await until(
      async () =>
        (
          await stack.db.query(
            `SELECT p.id, s.status, (SELECT count(*)::int FROM billing.applied_payments a WHERE a.payment_id = p.id) AS n
             FROM payments.payments p JOIN billing.subscriptions s ON s.id = p.subscription_id
            WHERE p.wallet_id = $1 AND p.status = 'paid'`,
            [wallet],
          )
        ).rows,
      (rows) => rows.every((r) => r.n === 1 && r.status === 'active'),
      30_000,
    );
    expect(applied.filter((r) => r.n !== 1 || r.status !== 'active')).toEqual([]);
    for (const id of paid)
      expect(
        applied.some((r) => r.id === id),
        id,
      ).toBe(true);
    expect(applied.find((r) => r.id === retry.body.payment_id)?.status).toBe('active');

    await expectOutboxPublishedOnce();
  });

  it('an outage in the middle of a renewal sweep loses and doubles no renewal; the clock moves once', async () => {
    await cluster.start();
    const plan = await req('plan', 'POST', '/plans', { key: admin, body: { name: 'Sweep', amount_sats: 1000, interval: 'weekly', trial_days: 2 } });
    // More than the four batches of 100 a sweep has in flight at once (their payments are made together),
    // so the first renewals seen are not all of them.
    const N = 600;
    const ids: string[] = [];
    for (let i = 0; i < N; i += 8) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(8, N - i) }, (_, j) =>
          req('subscribe', 'POST', '/public/subscribe', { body: { plan_id: plan.body.id, payment_method: 'lightning', email: `sweep${i + j}@example.com` } }),
        ),
      );
      for (const r of batch) {
        expect(r.status).toBe(201);
        ids.push(r.body.subscription_id);
      }
    }
    const clock = await req('clock', 'POST', '/dev/clock', { key: admin, body: {} });
    const end = (await stack.db.query('SELECT current_period_end FROM billing.subscriptions WHERE id = $1', [ids[0]])).rows[0].current_period_end as number;
    const advance = end - DAY / 2 - clock.body.now;

    const renewals = async () =>
      (await stack.db.query(`SELECT count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal'`, [ids])).rows[0]
        .n as number;
    const moving = req('clock', 'POST', '/dev/clock', { key: admin, body: { advance_seconds: advance } });
    // Stopped as soon as the sweep made its first renewals: it was under way, not done.
    const atCrash = await until(renewals, (n) => n > 0, 30_000);
    await cluster.crash();
    expect(atCrash).toBeGreaterThan(0);
    expect(atCrash).toBeLessThan(N);
    const down = Date.now();
    await expect(renewals()).rejects.toThrow(); // it is down

    // The clock moved, once, and the answer says so at once (its sweep goes on when the database is back).
    const moved = await moving;
    expect(moved.status).toBe(200);
    expect(moved.body.offset_seconds - clock.body.offset_seconds).toBe(advance);
    expect(moved.end - moved.start).toBeLessThan(BUS_TIMEOUT_MS + 2000);

    await sleep(Math.max(0, OUTAGE_MS - (Date.now() - down)));
    expect(await restoreAndTimeReadiness()).toBeLessThanOrEqual(5000);
    const done = await until(renewals, (n) => n >= N, 60_000);
    expect(done).toBe(N);
    await sleep(2000); // more scheduler ticks: still one each

    const per = await stack.db.query(
      `SELECT subscription_id, count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal' GROUP BY 1`,
      [ids],
    );
    expect(per.rows).toHaveLength(N);
    expect(per.rows.filter((r) => r.n !== 1)).toEqual([]);
    const marked = await stack.db.query(
      `SELECT count(*)::int AS n FROM billing.subscriptions WHERE id = ANY($1) AND renewal_for = current_period_end AND renewal_payment_id IS NOT NULL`,
      [ids],
    );
    expect(marked.rows[0].n).toBe(N);
    const reminders = await stack.db.query(
      `SELECT payload->'data'->>'subscription_id' AS id, count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = ANY($1) GROUP BY 1`,
      [ids],
    );
    expect(reminders.rows).toHaveLength(N);
    expect(reminders.rows.filter((r) => r.n !== 1)).toEqual([]);
    expect((await req('clock', 'POST', '/dev/clock', { key: admin, body: {} })).body.offset_seconds).toBe(moved.body.offset_seconds);

    expectAllAlive();
    await expectOutboxPublishedOnce();
  });
});

describe('POST /dev/clock with a sweep that takes long', () => {
  it('answers 200 once the clock moved, the sweep finishing in the background', async () => {
    await cluster.start();
    const plan = await req('plan', 'POST', '/plans', { key: admin, body: { name: 'Slow sweep', amount_sats: 1000, interval: 'weekly', trial_days: 2 } });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      ids.push(
        (await req('subscribe', 'POST', '/public/subscribe', { body: { plan_id: plan.body.id, payment_method: 'lightning', email: `slow${i}@example.com` } }))
          .body.subscription_id,
      );
    }
    const clock = await req('clock', 'POST', '/dev/clock', { key: admin, body: {} });
    const end = (await stack.db.query('SELECT current_period_end FROM billing.subscriptions WHERE id = $1', [ids[0]])).rows[0].current_period_end as number;
    const advance = end - DAY / 2 - clock.body.now;
    const renewals = async () =>
      (await stack.db.query(`SELECT count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal'`, [ids])).rows[0]
        .n as number;

    // The sweep is held up (its table locked) far longer than the gateway's BUS_TIMEOUT_MS.
    const locker = new pg.Client({ connectionString: stack.databaseUrl });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE billing.subscriptions IN ACCESS EXCLUSIVE MODE');
      const moved = await req('clock', 'POST', '/dev/clock', { key: admin, body: { advance_seconds: advance } });
      expect(moved.status).toBe(200);
      expect(moved.body.offset_seconds - clock.body.offset_seconds).toBe(advance);
      expect(await renewals()).toBe(0);
      await locker.query('COMMIT');
    } finally {
      await locker.end();
    }
    expect(await until(renewals, (n) => n === 3, 30_000)).toBe(3);
    expect((await req('clock', 'POST', '/dev/clock', { key: admin, body: {} })).body.offset_seconds - clock.body.offset_seconds).toBe(advance);
  });
});

describe("the notifier's log in a database outage", () => {
  it('with webhook deliveries under way: the outage is said once and its end once, without stacks or secrets', async () => {
    await cluster.start();
    // A receiver that holds every request until the database is down, then answers them all.
    const held: ServerResponse[] = [];
    const receiver = createServer((r, res) => {
      r.on('error', () => undefined);
      res.on('error', () => undefined);
      r.resume().on('end', () => held.push(res));
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    extras.push({ stop: () => new Promise<void>((r) => receiver.close(() => r())) });
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/held`;
    const plan = await req('plan', 'POST', '/plans', { key: admin, body: { name: 'Held webhooks', amount_sats: 1000, interval: 'weekly', trial_days: 2 } });
    const ep = await req('endpoint', 'POST', '/webhook-endpoints', { key: admin, body: { url, plan_id: plan.body.id, events: ['subscription.created'] } });
    expect(ep.status).toBe(201);
    const N = 60;
    for (let i = 0; i < N; i += 10) {
      const batch = await Promise.all(
        Array.from({ length: 10 }, (_, j) =>
          req('subscribe', 'POST', '/public/subscribe', {
            body: { plan_id: plan.body.id, payment_method: 'lightning', email: `held-hook${i + j}@example.com` },
          }),
        ),
      );
      expect(batch.map((r) => r.status)).toEqual(batch.map(() => 201));
    }
    // Every delivery sent and waiting for its answer when the database stops.
    expect(
      (await until(
        async () => held.length,
        (n) => n >= N,
        60_000,
      )) >= N,
    ).toBe(true);
    const notifier = stack.services.notifier;
    const from = notifier.lines.length;
    await cluster.crash();
    // Their answers arrive while it is down: none of the attempts can be recorded.
    for (const res of held.splice(0)) res.writeHead(200).end('ok');
    await sleep(5000);
    await cluster.start();
    // Anything not a JSON line (a Node warning on stderr) counts as a warning line.
    const lines = () =>
      notifier.lines.slice(from).map((l): { level: number; msg: string; worker?: string; consumer?: string } => {
        try {
          return JSON.parse(l);
        } catch {
          return { level: 40, msg: l };
        }
      });
    const back = await until(
      async () => lines().filter((l) => l.msg === 'database back, worker resumed'),
      (b) => b.some((l) => l.worker === 'webhooks'),
      30_000,
    );
    expect(back.map((l) => l.worker)).toContain('webhooks');
    const warns = lines().filter((l) => l.level >= 40);
    // Said once by each worker that met it (the webhook worker with its deliveries under way) and each
    // event consumer with events waiting, not once per delivery or redelivery; its end once too.
    const outage = ['database unavailable, worker retries every tick', 'events not handled: the database is unavailable; retried later'];
    expect(warns.filter((l) => !outage.includes(l.msg))).toEqual([]);
    const workers = warns.map((l) => l.worker ?? l.consumer);
    expect(workers).toContain('webhooks');
    expect(new Set(workers).size).toBe(workers.length);
    expect(new Set(back.map((l) => l.worker)).size).toBe(back.length);
    // The expected error is said by its message: no stack on any of them.
    expect(warns.filter((l) => /"stack"|\\n +at /.test(JSON.stringify(l)))).toEqual([]);
    const raw = notifier.lines.slice(from).join('\n');
    expect(raw).not.toContain(ep.body.secret);
    expect(raw).not.toContain(stack.env.SECRETS_KEY);
    for (const dbUrl of Object.values(stack.serviceDbUrls)) {
      const password = new URL(dbUrl).password;
      if (password) expect(raw).not.toContain(password);
    }
    expectAllAlive();
  });
});

/** Every outbox row of every service is published, and the stream holds each event once. */
async function expectOutboxPublishedOnce(): Promise<void> {
  const schemas = ['billing', 'payments', 'nwc', 'notifier'];
  const pending = () =>
    Promise.all(schemas.map(async (s) => (await stack.db.query(`SELECT count(*)::int AS n FROM ${s}.outbox WHERE published_at IS NULL`)).rows[0].n as number));
  expect(await until(pending, (ns) => ns.every((n) => n === 0), 30_000)).toEqual(schemas.map(() => 0));
  let rows = 0;
  for (const s of schemas) rows += (await stack.db.query(`SELECT count(*)::int AS n FROM ${s}.outbox`)).rows[0].n as number;
  const nc = await connect({ servers: stack.natsUrl, ...stack.natsOperator });
  try {
    const info = await (await jetstreamManager(nc)).streams.info('EVENTS');
    expect(info.state.messages).toBe(rows);
  } finally {
    await nc.close();
  }
}
