import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * The lease of an in-progress Idempotency-Key claim covers the gateway's whole wait for the request:
 * max(the route's bus wait, BUS_TIMEOUT_MS) plus 5 s. With BUS_TIMEOUT_MS above a route's own wait
 * (POST /dev/clock: 30 s) a retry while the first request still waits must be 409, not run it twice.
 * Billing is frozen with SIGSTOP so the first request is provably in flight.
 */
let stack: Stack;
const BUS_TIMEOUT_MS = 40_000;
const ROUTE_WAIT_MS = 30_000;

beforeAll(async () => {
  stack = await startStack({ wallets: 1, env: { BUS_TIMEOUT_MS: String(BUS_TIMEOUT_MS) } });
});
afterAll(async () => {
  stack?.services.billing.child.kill('SIGCONT');
  await stack?.stop();
});

describe('Idempotency-Key lease', () => {
  it('outlasts the longer of the route wait and BUS_TIMEOUT_MS: a retry in between is still in progress', async () => {
    const advance = (key: string) =>
      call(stack.api, 'POST', '/dev/clock', { body: { advance_seconds: 0 }, headers: { 'Idempotency-Key': key, 'X-Api-Key': stack.wallets[0]!.admin_key } });
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    try {
      const started = Date.now();
      const first = advance('lease-1');
      // Past the route's own wait plus the margin (the old lease), within the gateway's real wait.
      await new Promise((r) => setTimeout(r, ROUTE_WAIT_MS + 5000 + 2000 - (Date.now() - started)));
      const retry = await advance('lease-1');
      expect(Date.now() - started).toBeLessThan(BUS_TIMEOUT_MS);
      expect(retry.status, JSON.stringify(retry.body)).toBe(409);
      expect(retry.body.detail).toMatch(/in progress/);
      // Not final: the client is told when to ask again.
      expect(retry.headers.get('retry-after')).toBe('1');
      billing.kill('SIGCONT');
      expect((await first).status).toBe(200);
    } finally {
      billing.kill('SIGCONT');
    }
  });

  it('a request that failed while the database refused connections frees its key once it is back (found from outside: 409s)', async () => {
    const url = new URL(stack.databaseUrl);
    const dbName = url.pathname.slice(1);
    url.pathname = '/postgres';
    const admin = new pg.Client({ connectionString: url.toString() });
    await admin.connect();
    const create = (key: string) =>
      call(stack.api, 'POST', '/plans', {
        body: { name: 'Retried', amount_sats: 1000, interval: 'weekly' },
        headers: { 'Idempotency-Key': key, 'X-Api-Key': stack.wallets[0]!.admin_key },
      });
    const billing = stack.services.billing.child;
    try {
      // The key is claimed, the request waits in billing; then the database closes under both.
      billing.kill('SIGSTOP');
      const first = create('closed-1');
      await new Promise((r) => setTimeout(r, 500));
      await admin.query(`ALTER DATABASE "${dbName}" ALLOW_CONNECTIONS false`);
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [dbName]);
      billing.kill('SIGCONT');
      const failed = await first;
      expect(failed.status, JSON.stringify(failed.body)).toBe(503);
      await admin.query(`ALTER DATABASE "${dbName}" ALLOW_CONNECTIONS true`);
      // Well within the lease (BUS_TIMEOUT_MS + 5 s): the retry runs, it is not "still in progress".
      await new Promise((r) => setTimeout(r, 2000));
      const retry = await create('closed-1');
      expect(retry.status, JSON.stringify(retry.body)).toBe(201);
    } finally {
      billing.kill('SIGCONT');
      await admin.query(`ALTER DATABASE "${dbName}" ALLOW_CONNECTIONS true`).catch(() => undefined);
      await admin.end();
    }
  });
});
