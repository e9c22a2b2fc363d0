import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * An owner's write whose answer was lost on the bus: billing frozen with SIGSTOP until the gateway
 * answers 503, then let go. Found from outside: it then made the change nobody was told about, and a
 * retry without an Idempotency-Key (the 503 says "please retry") made it twice. A request its caller
 * gave up on is not made (withCallerDeadline): the retry, with or without the key, makes it once, and
 * is never refused as if it had been made (409 "paused").
 */
let stack: Stack;
let admin: ReturnType<typeof client>;
const BUS_TIMEOUT_MS = 2000;

beforeAll(async () => {
  stack = await startStack({ wallets: 1, env: { BUS_TIMEOUT_MS: String(BUS_TIMEOUT_MS) } });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
});
afterAll(async () => {
  stack?.services.billing.child.kill('SIGCONT');
  await stack?.stop();
});

const keyed = (key: string) => ({ headers: { 'Idempotency-Key': key } });

/** The request sent while billing is frozen: the gateway gives up on it (503), billing drops it after. */
async function lostAnswer(send: () => Promise<{ status: number; body: any }>) {
  const billing = stack.services.billing.child;
  billing.kill('SIGSTOP');
  let first: { status: number; body: any };
  try {
    first = await send();
  } finally {
    billing.kill('SIGCONT');
  }
  expect(first.status, JSON.stringify(first.body)).toBe(503);
}

/** The subscription as billing answers once it goes on (the requests sent while it was frozen read first). */
const onceBillingAnswers = async (id: string) =>
  (
    await until(
      () => admin.get(`/subscriptions/${id}`),
      (r) => r.status === 200,
    )
  ).body;

let planCount = 0;
async function activeSubscription() {
  const plan = (await admin.post('/plans', { name: `Lost answers ${++planCount}`, amount_sats: 2100, interval: 'monthly' })).body as { id: string };
  const sub = await call(stack.api, 'POST', '/public/subscribe', {
    body: { plan_id: plan.id, payment_method: 'lightning', email: `lost-${planCount}@example.com` },
  });
  expect(sub.status).toBe(201);
  expect((await call(stack.api, 'POST', `/dev/payments/${sub.body.payment_id}/pay`)).status).toBe(200);
  const active = await until(
    () => admin.get(`/subscriptions/${sub.body.subscription_id}`),
    (r) => r.body.status === 'active',
  );
  expect(active.body.status).toBe('active');
  return active.body as { id: string; current_period_end: number };
}

describe('an owner write whose answer was lost', () => {
  it('pause: the retry answers the paused subscription (200), not 409', async () => {
    const sub = await activeSubscription();
    await lostAnswer(() => admin.post(`/subscriptions/${sub.id}/pause`, undefined, keyed('stopkey-1')));
    // Billing answers again: the pause it was sent while frozen was not made.
    expect((await onceBillingAnswers(sub.id)).status).toBe('active');
    const retry = await admin.post(`/subscriptions/${sub.id}/pause`, undefined, keyed('stopkey-1'));
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body).toMatchObject({ id: sub.id, status: 'paused' });
    // From then on the gateway replays it; another body under the key is still refused.
    const replay = await admin.post(`/subscriptions/${sub.id}/pause`, undefined, keyed('stopkey-1'));
    expect(replay.status).toBe(200);
    expect(replay.body).toEqual(retry.body);
    const resumed = await admin.post(`/subscriptions/${sub.id}/resume`, undefined, keyed('stopkey-1'));
    expect(resumed.status).toBe(409);
    expect(resumed.body.detail).toMatch(/different request/);
  });

  it('extend: the retry answers the extended subscription; the period is extended once', async () => {
    const sub = await activeSubscription();
    const fiveDays = 5 * 86400;
    await lostAnswer(() => admin.post(`/subscriptions/${sub.id}/extend?days=5`, undefined, keyed('extend-1')));
    expect((await onceBillingAnswers(sub.id)).current_period_end).toBe(sub.current_period_end);
    const retry = await admin.post(`/subscriptions/${sub.id}/extend?days=5`, undefined, keyed('extend-1'));
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.current_period_end).toBe(sub.current_period_end + fiveDays);
    expect((await admin.get(`/subscriptions/${sub.id}`)).body.current_period_end).toBe(sub.current_period_end + fiveDays);
  });

  it('extend: two lost tries that billing handles at once extend once; the next retry answers that', async () => {
    const sub = await activeSubscription();
    const billing = stack.services.billing.child;
    const extend = () => admin.post(`/subscriptions/${sub.id}/extend?days=3`, undefined, keyed('extend-twice'));
    billing.kill('SIGSTOP');
    let tries: { status: number }[];
    try {
      // The gateway frees the key after each 503, so the second try goes to billing too.
      tries = [await extend(), await extend()];
    } finally {
      billing.kill('SIGCONT');
    }
    expect(tries.map((t) => t.status)).toEqual([503, 503]);
    const threeDays = 3 * 86400;
    const retry = await until(extend, (r) => r.status !== 409 || !/in progress/.test(r.body.detail));
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.current_period_end).toBe(sub.current_period_end + threeDays);
    expect((await admin.get(`/subscriptions/${sub.id}`)).body.current_period_end).toBe(sub.current_period_end + threeDays);
  });

  it('POST /plans: the retry answers the plan made (201), and there is one plan', async () => {
    const body = { name: 'Made once', amount_sats: 3100, interval: 'weekly' };
    await lostAnswer(() => admin.post('/plans', body, keyed('plan-1')));
    const plansNamed = async () =>
      (await stack.db.query(`SELECT id FROM billing.plans WHERE wallet_id = $1 AND name = $2`, [stack.wallets[0]!.id, body.name])).rows as {
        id: string;
      }[];
    await until(
      () => admin.get('/plans'),
      (r) => r.status === 200,
    );
    expect(await plansNamed()).toHaveLength(0);
    const retry = await admin.post('/plans', body, keyed('plan-1'));
    expect(retry.status, JSON.stringify(retry.body)).toBe(201);
    expect(retry.body).toMatchObject({ id: expect.any(String), name: body.name });
    expect(await plansNamed()).toEqual([{ id: retry.body.id }]);
  });

  it('extend without an Idempotency-Key: the 503 made nothing, so its retry extends once (found from outside: twice)', async () => {
    const sub = await activeSubscription();
    await lostAnswer(() => admin.post(`/subscriptions/${sub.id}/extend?days=5`));
    expect((await onceBillingAnswers(sub.id)).current_period_end).toBe(sub.current_period_end);
    const retry = await admin.post(`/subscriptions/${sub.id}/extend?days=5`);
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.current_period_end).toBe(sub.current_period_end + 5 * 86400);
    expect((await admin.get(`/subscriptions/${sub.id}`)).body.current_period_end).toBe(sub.current_period_end + 5 * 86400);
  });

  it('a first try billing never received: the retry runs it', async () => {
    const sub = await activeSubscription();
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    let first: { status: number };
    try {
      first = await admin.post(`/subscriptions/${sub.id}/cancel`, { immediate: false }, keyed('never-1'));
      // The request dies with the process before it is read.
      billing.kill('SIGKILL');
    } finally {
      billing.kill('SIGCONT');
    }
    expect(first.status).toBe(503);
    // While no billing listens, the 503 says so (and that it may only be starting).
    const away = await until(
      () => admin.get('/plans'),
      (r) => r.status === 503 && /not running/.test(r.body.detail),
    );
    expect([away.status, away.headers.get('retry-after'), away.body.detail]).toEqual([
      503,
      expect.any(String),
      'This operation is not available right now: the service that answers it is not running or not ready yet',
    ]);
    await stack.restartBilling();
    expect((await admin.get(`/subscriptions/${sub.id}`)).body.status).toBe('active');
    const retry = await admin.post(`/subscriptions/${sub.id}/cancel`, { immediate: false }, keyed('never-1'));
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.success).toBe(true);
    expect((await admin.get(`/subscriptions/${sub.id}`)).body.status).toBe('cancelled');
  });
});
