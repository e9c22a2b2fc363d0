import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { timedCall, until } from './support/http.js';
import { startPgCluster, type PgCluster } from './support/pg-cluster.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * The database hangs instead of going away: every PostgreSQL process of a private server is stopped
 * (SIGSTOP), so connections stay open and nothing answers, as when its host freezes or a network drops
 * packets without a reset. Found from outside: a request whose API key the gateway had to look up again
 * got no answer at all (the statement waited on the open socket with no end). Every request must get
 * a 503 with Retry-After in bounded time, no process may end, and all must work again once it thaws.
 */
const BUS_TIMEOUT_MS = 3000;
const QUERY_TIMEOUT_MS = 2000;
/** The longest a client may wait for its 503: the bus wait plus the statement's, with room for a slow machine. */
const BOUND_MS = BUS_TIMEOUT_MS + QUERY_TIMEOUT_MS + 5000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: PgCluster;
let stack: Stack;
let admin: string;

beforeAll(async () => {
  cluster = await startPgCluster();
  stack = await startStack({
    adminUrl: cluster.adminUrl,
    wallets: 1,
    // No cached API keys: every request reads the gateway's key table, as the first one after a key's TTL does.
    env: { BUS_TIMEOUT_MS: String(BUS_TIMEOUT_MS), DB_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS), KEY_CACHE_TTL_MS: '0' },
  });
  admin = stack.wallets[0]!.admin_key;
});
afterAll(async () => {
  cluster?.thaw();
  await stack?.stop();
  await cluster?.destroy();
});

/** One request; status 0 is no answer within a minute. */
async function req(method: string, path: string, o: { key?: string; body?: unknown; idem?: string } = {}) {
  const a = await timedCall(stack.api, method, path, { ...o, headers: o.idem ? { 'Idempotency-Key': o.idem } : {} });
  return { ...a, ms: a.end - a.start };
}

const readiness = () =>
  Promise.all(
    Object.values(stack.services).map((s) =>
      fetch(`${s.url}/readyz`, { signal: AbortSignal.timeout(10_000) }).then(
        (r) => r.status,
        () => 0,
      ),
    ),
  );

describe('a database that hangs', () => {
  it('answers 503 with Retry-After in bounded time, ends no process, and works again once it thaws', async () => {
    const plan = await req('POST', '/plans', { key: admin, body: { name: 'Before', amount_sats: 1000, interval: 'monthly' } });
    expect(plan.status).toBe(201);
    const planId = (plan.body as { id: string }).id;

    cluster.freeze();
    // Two rounds: the second once every pooled connection of the first is stuck or dropped.
    const round = () =>
      Promise.all([
        req('GET', '/plans', { key: admin }),
        req('GET', `/plans/${planId}`, { key: admin }),
        req('POST', '/plans', { key: admin, body: { name: 'During', amount_sats: 1000, interval: 'monthly' }, idem: 'freeze-during' }),
        req('GET', `/public/plan/${planId}`),
      ]);
    const first = await round();
    await sleep(QUERY_TIMEOUT_MS);
    const second = await round();
    for (const a of [...first, ...second]) {
      expect({ status: a.status, retryAfter: a.retryAfter !== null, bounded: a.ms < BOUND_MS }, JSON.stringify(a)).toEqual({
        status: 503,
        retryAfter: true,
        bounded: true,
      });
    }
    expect(await readiness()).toEqual(Object.values(stack.services).map(() => 503));

    cluster.thaw();
    const ready = await until(readiness, (s) => s.every((x) => x === 200), 20_000);
    expect(ready).toEqual(Object.values(stack.services).map(() => 200));
    for (const s of Object.values(stack.services)) {
      expect({ exit: s.child.exitCode, signal: s.child.signalCode }, s.name).toEqual({ exit: null, signal: null });
      expect(
        s.lines.filter((l) => /(unhandled|uncaught)|"level":50/.test(l) && !/database unavailable|idempotency purge failed/.test(l)),
        s.name,
      ).toEqual([]);
    }

    // The write refused during the hang is made once when retried with its key.
    const retried = await until(
      () => req('POST', '/plans', { key: admin, body: { name: 'During', amount_sats: 1000, interval: 'monthly' }, idem: 'freeze-during' }),
      (a) => a.status === 201,
      20_000,
    );
    expect(retried.status).toBe(201);
    const list = await req('GET', '/plans?limit=100', { key: admin });
    expect(list.status).toBe(200);
    const names = (list.body as { items: Array<{ name: string }> }).items.map((p) => p.name).sort();
    expect(names).toEqual(['Before', 'During']);
    expect((await req('GET', `/public/plan/${planId}`)).status).toBe(200);
  }, 120_000);
});
