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
      billing.kill('SIGCONT');
      expect((await first).status).toBe(200);
    } finally {
      billing.kill('SIGCONT');
    }
  });
});
