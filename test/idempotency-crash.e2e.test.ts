import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * A checkout whose answer was lost (issue 8, defects 5 and 7): the gateway killed mid-request, or its bus
 * wait over while billing was frozen (the request is then not made: withCallerDeadline). A retry with the same Idempotency-Key must get that
 * checkout back, never a key locked for a day nor a 409 for a subscription the client cannot see.
 * Billing is frozen with SIGSTOP so the request is provably in flight; the gateway is killed with SIGKILL.
 */
let stack: Stack;
let admin: ReturnType<typeof client>;
const BUS_TIMEOUT_MS = 3000;
/** The gateway's lease of an in-progress claim: the bus wait plus 5 s. */
const LEASE_MS = BUS_TIMEOUT_MS + 5000;

beforeAll(async () => {
  stack = await startStack({ wallets: 1, env: { BUS_TIMEOUT_MS: String(BUS_TIMEOUT_MS), ONCHAIN_PROVIDER: 'dev' } });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
});
afterAll(async () => {
  stack?.services.billing.child.kill('SIGCONT');
  stack?.services.payments.child.kill('SIGCONT');
  await stack?.stop();
});

const subscribeWith = (key: string, body: Record<string, unknown>) =>
  call(stack.api, 'POST', '/public/subscribe', { body, headers: { 'Idempotency-Key': key } });

async function subscriptionsOf(email: string) {
  const { rows } = await stack.db.query(
    `SELECT s.id, s.status FROM billing.subscriptions s JOIN billing.subscribers c ON c.id = s.subscriber_id WHERE c.email = $1`,
    [email],
  );
  return rows as Array<{ id: string; status: string }>;
}
async function paymentsOf(subId: string) {
  const { rows } = await stack.db.query(`SELECT id, status FROM payments.payments WHERE subscription_id = $1`, [subId]);
  return rows as Array<{ id: string; status: string }>;
}
async function plan(body: Record<string, unknown> = {}) {
  return (await admin.post('/plans', { name: 'Lost answers', amount_sats: 2100, interval: 'monthly', ...body })).body as { id: string };
}

describe('the gateway killed mid-request', () => {
  it('leaves the key claimed only for a short lease; the retry after it answers the checkout billing made', async () => {
    const p = await plan();
    const body = { plan_id: p.id, payment_method: 'lightning', email: 'killed@example.com' };
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    let claimedAt = 0;
    try {
      const inFlight = subscribeWith('kill-me-1', body).catch((err) => err);
      // The gateway claimed the key and waits for billing.
      await until(
        async () => (await stack.db.query(`SELECT 1 FROM gateway.idempotency_keys WHERE key = 'kill-me-1'`)).rowCount,
        (n) => n === 1,
      );
      claimedAt = Date.now();
      // Its request to billing is on the wire (published right after the claim).
      await new Promise((r) => setTimeout(r, 500));
      stack.services.gateway.child.kill('SIGKILL');
      expect(await inFlight).toBeInstanceOf(Error);
    } finally {
      billing.kill('SIGCONT');
    }
    // Billing still handles the request it had received: the subscription and its invoice exist.
    const [made] = await until(
      () => subscriptionsOf('killed@example.com'),
      (r) => r.length === 1,
    );
    const [invoice] = await until(
      () => paymentsOf(made!.id),
      (r) => r.length === 1,
    );
    await stack.restartGateway();

    // Inside the lease the claim still stands (the first gateway might have been alive).
    if (Date.now() - claimedAt < LEASE_MS - 1000) {
      const early = await subscribeWith('kill-me-1', body);
      expect(early.status).toBe(409);
      expect(early.body.detail).toMatch(/in progress/);
    }
    await new Promise((r) => setTimeout(r, Math.max(0, claimedAt + LEASE_MS + 1000 - Date.now())));
    const retry = await subscribeWith('kill-me-1', body);
    expect(retry.status, JSON.stringify(retry.body)).toBe(201);
    expect(retry.body).toMatchObject({ subscription_id: made!.id, payment_id: invoice!.id, payment_method: 'lightning' });
    expect(retry.body.payment_request).toMatch(/^lnbc/);
    // The subscriber was created by that request: the retry carries the portal link too.
    expect(retry.body.manage_url).toMatch(/token=/);
    expect(await subscriptionsOf('killed@example.com')).toHaveLength(1);
    expect(await paymentsOf(made!.id)).toHaveLength(1);

    // From now on the stored answer is replayed.
    const replay = await subscribeWith('kill-me-1', body);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.payment_id).toBe(invoice!.id);
    // A different body under the key is still refused.
    expect((await subscribeWith('kill-me-1', { ...body, email: 'other@example.com' })).status).toBe(409);

    expect((await call(stack.api, 'POST', `/dev/payments/${invoice!.id}/pay`)).status).toBe(200);
    const active = await until(
      () => admin.get(`/subscriptions/${made!.id}`),
      (r) => r.body.status === 'active',
    );
    expect(active.body.status).toBe('active');
  });
});

describe('a subscribe that answered 503', () => {
  // Found from outside: billing then made the checkout nobody was told about. A request its caller gave
  // up on is not made (withCallerDeadline): the retry makes it, once.
  it('is not made after the 503; the retry with the same Idempotency-Key makes it, once, not 409', async () => {
    const p = await plan();
    const body = { plan_id: p.id, payment_method: 'lightning', email: 'outage@example.com' };
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    let first: Awaited<ReturnType<typeof subscribeWith>>;
    try {
      first = await subscribeWith('outage-1', body);
    } finally {
      billing.kill('SIGCONT');
    }
    expect(first.status).toBe(503);
    // Billing answers again: the checkout it was sent while frozen was not made.
    await until(
      () => admin.get('/plans'),
      (r) => r.status === 200,
    );
    expect(await subscriptionsOf('outage@example.com')).toEqual([]);

    const retry = await subscribeWith('outage-1', body);
    expect(retry.status, JSON.stringify(retry.body)).toBe(201);
    expect(retry.body.manage_url).toMatch(/token=/);
    const [made] = await subscriptionsOf('outage@example.com');
    const [invoice] = await paymentsOf(made!.id);
    expect(retry.body).toMatchObject({ subscription_id: made!.id, payment_id: invoice!.id });
    // Another key is another request by the same contact: their unpaid checkout again, without the portal
    // link (only the request that made it may see it).
    const other = await subscribeWith('outage-2', body);
    expect(other.status).toBe(201);
    expect(other.body).toMatchObject({ subscription_id: made!.id, payment_id: invoice!.id });
    expect(other.body).not.toHaveProperty('manage_url');
    expect(await subscriptionsOf('outage@example.com')).toHaveLength(1);

    expect((await call(stack.api, 'POST', `/dev/payments/${invoice!.id}/pay`)).status).toBe(200);
    expect(
      (
        await until(
          () => admin.get(`/subscriptions/${made!.id}`),
          (r) => r.body.status === 'active',
        )
      ).body.status,
    ).toBe('active');
  });

  it('that would replace the unpaid checkout of another method: not replaced after the 503; the retry replaces it (review finding: 409)', async () => {
    const p = await plan({ allow_onchain: true });
    const email = 'switched-outage@example.com';
    const lightning = await call(stack.api, 'POST', '/public/subscribe', { body: { plan_id: p.id, payment_method: 'lightning', email } });
    expect(lightning.status).toBe(201);
    // Back on the page, on-chain this time, and its answer lost.
    const body = { plan_id: p.id, payment_method: 'onchain', email };
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    let first: Awaited<ReturnType<typeof subscribeWith>>;
    try {
      first = await subscribeWith('switched-1', body);
    } finally {
      billing.kill('SIGCONT');
    }
    expect(first.status).toBe(503);
    await until(
      () => admin.get('/plans'),
      (r) => r.status === 200,
    );
    expect(await subscriptionsOf(email)).toEqual([{ id: lightning.body.subscription_id, status: 'pending' }]);

    const retry = await subscribeWith('switched-1', body);
    expect(retry.status, JSON.stringify(retry.body)).toBe(201);
    expect(retry.body).toMatchObject({ payment_method: 'onchain' });
    expect(retry.body.subscription_id).not.toBe(lightning.body.subscription_id);
    expect((await admin.get(`/subscriptions/${lightning.body.subscription_id}`)).body.status).toBe('expired');
    // The retry again is answered as it was (the gateway keeps the answer), not a 409.
    const again = await subscribeWith('switched-1', body);
    expect([again.status, again.body.subscription_id]).toEqual([201, retry.body.subscription_id]);
  });
});

describe('a subscribe whose payment request got no answer in time', () => {
  it('keeps the checkout pending; the retry with the same Idempotency-Key answers it with the payment made meanwhile', async () => {
    const p = await plan();
    const body = { plan_id: p.id, payment_method: 'lightning', email: 'slow-payments@example.com' };
    const payments = stack.services.payments.child;
    payments.kill('SIGSTOP');
    let first: Awaited<ReturnType<typeof subscribeWith>>;
    try {
      first = await subscribeWith('slow-1', body);
    } finally {
      payments.kill('SIGCONT');
    }
    expect(first.status).toBe(503);
    // Payments handles the request it received while frozen: the payment exists, nobody was told.
    const [made] = await until(
      () => subscriptionsOf('slow-payments@example.com'),
      (r) => r.length === 1,
    );
    const [invoice] = await until(
      () => paymentsOf(made!.id),
      (r) => r.length === 1,
    );
    expect(invoice!.status).toBe('pending');
    expect((await subscriptionsOf('slow-payments@example.com'))[0]!.status).toBe('pending');

    const retry = await subscribeWith('slow-1', body);
    expect(retry.status, JSON.stringify(retry.body)).toBe(201);
    expect(retry.body).toMatchObject({ subscription_id: made!.id, payment_id: invoice!.id });
    expect((await call(stack.api, 'POST', `/dev/payments/${invoice!.id}/pay`)).status).toBe(200);
    expect(
      (
        await until(
          () => admin.get(`/subscriptions/${made!.id}`),
          (r) => r.body.status === 'active',
        )
      ).body.status,
    ).toBe('active');
  });
});

describe('the gateway stopped (SIGTERM) with a keep-alive connection busy', () => {
  it('answers the request under way and closes that connection, so the client reconnects elsewhere (found from outside: kept alive)', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const url = new URL(`${stack.api}/plans`);
    const post = () =>
      new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
        const req = http.request(
          url,
          { method: 'POST', agent, headers: { 'content-type': 'application/json', 'x-api-key': stack.wallets[0]!.admin_key } },
          (res) => {
            res.resume();
            res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection }));
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify({ name: 'Drained', amount_sats: 1000, interval: 'weekly' }));
      });
    expect(await post()).toEqual({ status: 201, connection: 'keep-alive' });
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    try {
      const underWay = post();
      await new Promise((r) => setTimeout(r, 500));
      stack.services.gateway.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      billing.kill('SIGCONT');
      expect(await underWay).toEqual({ status: 201, connection: 'close' });
    } finally {
      billing.kill('SIGCONT');
      agent.destroy();
      await stack.restartGateway();
    }
  });
});
