import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * Billing takes the payment methods the payments service says it has (payments.internal.methods), not
 * *_PROVIDER variables of its own: changing a provider is a payments restart, and billing follows.
 */
let stack: Stack;
let admin: ReturnType<typeof client>;
const anon = () => client(stack.api);

beforeAll(async () => {
  // A short bus timeout, so a call to a hung service fails within the test (after its courtesy's 2 s).
  stack = await startStack({ wallets: 1, env: { PAYMENT_METHODS_TTL_MS: '200', FIAT_RATE_FIXED: '80000', BUS_TIMEOUT_MS: '3500' } });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
});
afterAll(async () => {
  await stack?.stop();
});

describe('payment methods come from the payments service', () => {
  it('refuses card plans while payments has no card rail, takes them once it has one, and holds the last answer while payments is away', async () => {
    const refused = await admin.post('/plans', { name: 'Card', amount_sats: 2000, interval: 'monthly', allow_cardproc: true });
    expect(refused.status).toBe(422);
    expect(refused.body.detail).toEqual([expect.objectContaining({ loc: ['body', 'allow_cardproc'], msg: expect.stringContaining('CARDPROC_PROVIDER') })]);

    const plan = await admin.post('/plans', { name: 'Both', amount_sats: 2000, interval: 'monthly' });
    expect(plan.status).toBe(201);
    expect((await anon().get(`/public/plan/${plan.body.id}`)).body.payment_methods).toEqual(['lightning']);

    // Only the payments service learns of the card provider (billing's environment is the same object,
    // but billing no longer reads *_PROVIDER).
    stack.env.CARDPROC_PROVIDER = 'dev';
    await stack.restartPayments();
    const card = await until(
      () => admin.post('/plans', { name: 'Card', amount_sats: 2000, interval: 'monthly', allow_cardproc: true }),
      (r) => r.status === 201,
    );
    expect(card.status).toBe(201);
    const both = await admin.put(`/plans/${plan.body.id}`, { allow_cardproc: true });
    expect(both.status).toBe(200);
    expect((await anon().get(`/public/plan/${plan.body.id}`)).body.payment_methods).toEqual(['lightning', 'cardproc']);

    await stack.stopPayments();
    await new Promise((r) => setTimeout(r, 400));
    const held = await anon().get(`/public/plan/${plan.body.id}`);
    expect(held.status).toBe(200);
    expect(held.body.payment_methods).toEqual(['lightning', 'cardproc']);
    await stack.restartPayments();
  });

  it('payments hung: the public plan answers at once from the last methods, its fiat price is waited for once, each miss logged once (found from outside: a 503 every PAYMENT_METHODS_TTL_MS, 2 s every time, two log lines a miss)', async () => {
    const p = await admin.post('/plans', { name: 'Hung payments', amount_sats: 2100, interval: 'monthly', allow_cardproc: true });
    expect(p.status, JSON.stringify(p.body)).toBe(201);
    const get = async () => {
      const started = Date.now();
      const res = await anon().get(`/public/plan/${p.body.id}`);
      return { res, ms: Date.now() - started };
    };
    expect((await get()).res.body.fiat_price).toEqual({ amount: expect.any(Number), currency: expect.any(String) });
    const payments = stack.services.payments.child;
    payments.kill('SIGSTOP');
    try {
      await sleep(300); // the methods are older than PAYMENT_METHODS_TTL_MS
      const seen = [await get(), await get(), await get()];
      for (const { res } of seen) {
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        expect(res.body.payment_methods).toEqual(['lightning', 'cardproc']);
        expect(res.body.fiat_price).toBeUndefined();
      }
      // The first waits the fiat price's 2 s courtesy (not the 3.5 s bus timeout); the next ones know
      // payments does not answer and wait none of it.
      expect(seen.map((s) => s.ms < (s === seen[0] ? 3500 : 2000))).toEqual([true, true, true]);
      // The fiat price's ask fails at the bus timeout (3.5 s) as well: the same miss, not logged again.
      await sleep(2500);
      const logged = stack.services.billing.lines.filter((l) => l.includes(p.body.id) && l.includes('fiat price'));
      expect(logged).toEqual([expect.stringContaining('fiat price of the public plan not answered in 2000 ms')]);
    } finally {
      payments.kill('SIGCONT');
    }
  });
});
