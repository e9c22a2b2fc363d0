import { randomBytes } from 'node:crypto';
import { createServer, type ServerResponse, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretBox, systemClock } from '@sb/runtime';
import type { Deps } from '../src/deps.js';
import type { Claim } from '../src/store/claim.js';
import type { AttemptOutcome, ClaimedDelivery } from '../src/store/deliveries.repo.js';
import { WebhookWorker } from '../src/workers.js';
import { Registry } from 'prom-client';
import { notifierMetrics } from '../src/metrics.js';

/**
 * The delivery worker against a local receiver, with the store replaced by a queue of due deliveries
 * and a list of recorded attempts: what it sends, when it claims more, and how attempts are recorded.
 */
const box = new SecretBox(randomBytes(32).toString('hex'));
const secret = `whsec_${randomBytes(24).toString('base64')}`;
const body = JSON.stringify({ event: 'subscription.created', timestamp: 1700000000, data: { plan_id: 'plan_1' } });

let server: Server;
let base: string;
const got: { path: string; id: string; verified: boolean }[] = [];
const held: ServerResponse[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      let verified = false;
      try {
        new Webhook(secret).verify(raw, req.headers as Record<string, string>);
        verified = true;
      } catch {
        /* recorded as unverified */
      }
      got.push({ path: req.url ?? '', id: String(req.headers['webhook-id']), verified });
      // The slow receiver answers only when the test lets it.
      if (req.url === '/slow') held.push(res);
      else res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  return new Promise<void>((r) => server.close(() => r()));
});

/** `finish`: how recording goes (the store's finishAttempts); `log`: where the worker's lines go. */
function harness(o: { finish?: () => Promise<void>; log?: pino.DestinationStream; timeoutMs?: number } = {}) {
  const due: ClaimedDelivery[] = [];
  const claims: number[] = [];
  const busy: Map<string, number>[] = [];
  const recorded: { id: string; outcome: AttemptOutcome }[][] = [];
  const deliveries = {
    async claimDue(_q: unknown, c: Claim) {
      claims.push(c.limit);
      busy.push(new Map(c.busy));
      return due.splice(0, c.limit);
    },
    async finishAttempts(_q: unknown, done: { id: string; outcome: AttemptOutcome }[]) {
      await o.finish?.();
      recorded.push(done.map(({ id, outcome }) => ({ id, outcome })));
    },
  };
  const d = {
    db: {},
    clock: systemClock,
    log: o.log ? pino({ level: 'info' }, o.log) : pino({ level: 'silent' }),
    deliveries,
    secrets: box,
    addresses: { allowPrivate: true },
    webhookTimeoutMs: o.timeoutMs ?? 10_000,
    metrics: notifierMetrics(new Registry()),
  } as unknown as Deps;
  const row = (id: string, path: string, endpoint = 'wh_1'): ClaimedDelivery => ({
    id,
    endpoint_id: endpoint,
    wallet_id: 'wal_1',
    event_id: `evt_${id}`,
    event: 'subscription.created',
    body,
    replay_of: null,
    status: 'pending',
    attempt_count: 0,
    first_attempt_at: null,
    next_attempt_at: 0,
    last_status_code: null,
    last_error: null,
    delivered_at: null,
    created_at: 0,
    trace_context: null,
    url: `${base}${path}`,
    secret_sealed: box.seal(secret),
  });
  return { worker: new WebhookWorker(d), due, claims, busy, recorded, row };
}

const until = async (ok: () => boolean, ms = 5000) => {
  for (const end = Date.now() + ms; !ok(); ) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
};

describe('webhook delivery worker', () => {
  it('a slow receiver holds up only its own delivery: later ones are claimed, sent and recorded meanwhile', async () => {
    const h = harness();
    h.due.push(h.row('slow1', '/slow'));
    // It claimed one (more may have come due meanwhile), without waiting for the send; the next finds none.
    expect(await h.worker.deliverDue()).toBe(true);
    expect(await h.worker.deliverDue()).toBe(false);
    await until(() => held.length === 1);
    h.due.push(h.row('fast1', '/fast'), h.row('fast2', '/fast'));
    expect(await h.worker.deliverDue()).toBe(true);
    await until(() => h.recorded.flat().length === 2);
    expect(
      h.recorded
        .flat()
        .map((r) => [r.id, r.outcome.delivered])
        .sort(),
    ).toEqual([
      ['fast1', true],
      ['fast2', true],
    ]);
    expect(got.filter((g) => g.path === '/fast').every((g) => g.verified)).toBe(true);
    // Stopping waits for the slow one and its record.
    const stopped = h.worker.stop();
    held.shift()!.writeHead(500).end('later');
    await stopped;
    expect(h.recorded.flat().at(-1)).toMatchObject({ id: 'slow1', outcome: { delivered: false, status_code: 500, error: 'HTTP 500: later' } });
  });

  it('keeps at most 400 under way and claims more once 50 of them are done, telling the claim how many each endpoint has', async () => {
    const h = harness();
    // Eight endpoints, none at its share of 100.
    for (let i = 0; i < 430; i++) h.due.push(h.row(`s${i}`, '/slow', `wh_${i % 8}`));
    const before = held.length;
    expect(await h.worker.deliverDue()).toBe(true);
    expect(h.claims).toEqual([400]);
    await until(() => held.length === before + 400);
    // The next round waits for places: none free yet.
    let second = false;
    const next = h.worker.deliverDue().then((full) => (second = full));
    await new Promise((r) => setTimeout(r, 100));
    expect(h.claims).toEqual([400]);
    for (const res of held.splice(before, 49)) res.writeHead(200).end();
    await new Promise((r) => setTimeout(r, 100));
    expect(h.claims).toEqual([400]);
    held.splice(before, 1)[0]!.writeHead(200).end();
    await next;
    // 50 places were free: 30 were left to claim. The claim knew the endpoints had 350 under way.
    expect(h.claims).toEqual([400, 50]);
    expect(h.busy[0]).toEqual(new Map());
    expect([...h.busy[1]!.values()].reduce((a, b) => a + b)).toBe(350);
    expect(second).toBe(true);
    await until(() => held.length === before + 380);
    for (const res of held.splice(before)) res.writeHead(200).end();
    await h.worker.stop();
    expect(h.recorded.flat()).toHaveLength(430);
    expect(h.recorded.flat().every((r) => r.outcome.delivered)).toBe(true);
  });

  it('the database away while deliveries are under way is said once, without a stack; other failures each with their stack', async () => {
    const lines: { level: number; msg: string; err?: { stack?: string }; error?: string }[] = [];
    const log = { write: (l: string) => void lines.push(JSON.parse(l)) };
    let fail: Error | undefined = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    const h = harness({
      log,
      finish: async () => {
        if (fail) throw fail;
      },
    });
    for (let i = 0; i < 20; i++) h.due.push(h.row(`away${i}`, '/fast'));
    await h.worker.deliverDue();
    await until(() => got.filter((g) => g.id.startsWith('evt_away')).length === 20);
    await h.worker.stop();
    const warns = lines.filter((l) => l.level >= 40);
    expect(warns.map((l) => [l.msg, l.error, l.err])).toEqual([
      ['database unavailable, worker retries every tick', 'connect ECONNREFUSED 127.0.0.1:5432', undefined],
    ]);
    // An unexpected failure is each delivery's own, with its stack.
    fail = new Error('refused by a trigger');
    for (let i = 0; i < 2; i++) h.due.push(h.row(`odd${i}`, '/fast'));
    await h.worker.deliverDue();
    await until(() => lines.filter((l) => l.msg.startsWith('webhook attempt not recorded')).length === 2);
    await h.worker.stop();
    const odd = lines.filter((l) => l.msg.startsWith('webhook attempt not recorded'));
    expect(odd.map((l) => l.err?.stack?.split('\n')[0])).toEqual(['Error: refused by a trigger', 'Error: refused by a trigger']);
  });

  it('an endpoint whose last attempt ran into the timeout gets a share of 4, until an attempt of it is fast again', async () => {
    const h = harness({ timeoutMs: 300 });
    const before = held.length;
    h.due.push(h.row('slow1', '/slow'));
    await h.worker.deliverDue();
    // Never answered: cut off at the timeout, and the endpoint is slow.
    await until(() => h.recorded.flat().length === 1);
    expect(h.recorded.flat()[0]).toMatchObject({ id: 'slow1', outcome: { delivered: false, status_code: null } });
    held.splice(before);
    h.due.push(h.row('fast1', '/fast'));
    await h.worker.deliverDue();
    // Counted as 96 under way of the 100 an endpoint may have.
    expect(h.busy.at(-1)).toEqual(new Map([['wh_1', 96]]));
    await until(() => h.recorded.flat().length === 2);
    await h.worker.deliverDue();
    expect(h.busy.at(-1)).toEqual(new Map());
    await h.worker.stop();
  });
});
