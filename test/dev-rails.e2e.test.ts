import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * Every rail on its dev provider, as `npm start` runs them: on-chain, card and wallet processor are
 * checked out, paid through the dev endpoint and renewed with a reminder that carries what pays them.
 */
const DAY = 86_400;
let stack: Stack;
let db: Stack['db'];
let admin: ReturnType<typeof client>;
const anon = () => client(stack.api);

beforeAll(async () => {
  stack = await startStack({
    wallets: 1,
    env: {
      ONCHAIN_PROVIDER: 'dev',
      CARDPROC_PROVIDER: 'dev',
      WALLETPROC_PROVIDER: 'dev',
      FIAT_RATE_FIXED: '80000',
      FIAT_CURRENCY: 'eur',
      PUBLIC_BASE_URL: 'http://pay.example.test',
      // A scheduler sweeping often, as under npm start: a clock move must not be missed by a sweep in progress.
      SCHEDULER_INTERVAL_MS: '100',
      BUS_TIMEOUT_MS: '60000',
    },
  });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
  db = stack.db;
});
afterAll(async () => {
  await stack?.stop();
});

const everyRail = { allow_onchain: true, allow_cardproc: true, allow_walletproc: true };

describe('dev rails', () => {
  it('card and wallet-processor callbacks answer 400 "Invalid callback": nothing under a dev provider can verify them', async () => {
    for (const rail of ['cardproc', 'walletproc']) {
      for (const raw of ['{"id":"evt_1","type":"checkout.session.completed"}', '', 'not json']) {
        const r = await anon().post(`/public/webhook/${rail}`, undefined, { raw, headers: { 'Stripe-Signature': 't=1,v1=00' } });
        expect(r.status, `${rail} ${raw}`).toBe(400);
        expect(r.body).toEqual({ detail: 'Invalid callback' });
      }
    }
  });

  it('the public plan lists every configured method (NWC rides on the Lightning provider)', async () => {
    const plan = (await admin.post('/plans', { name: 'All rails', amount_sats: 25_000, interval: 'monthly', ...everyRail, allow_nwc: true })).body;
    expect((await anon().get(`/public/plan/${plan.id}`)).body.payment_methods).toEqual(['lightning', 'onchain', 'nwc', 'cardproc', 'walletproc']);
  });

  it.each([
    ['onchain', 'onchain'],
    ['card', 'cardproc'],
    ['walletproc', 'walletproc'],
  ])('%s: checkout -> dev pay -> active', async (asked, method) => {
    const plan = (await admin.post('/plans', { name: `Dev ${method}`, amount_sats: 25_000, interval: 'monthly', ...everyRail })).body;
    const res = await anon().post('/public/subscribe', { plan_id: plan.id, payment_method: asked, email: `${method}@example.com` });
    expect(res.status).toBe(201);
    const c = res.body;
    expect(c.payment_method).toBe(method);
    expect(c.expires_at - Math.floor(Date.now() / 1000)).toBeGreaterThan(23 * 3600);
    const payment = (await admin.get(`/payments/${c.payment_id}`)).body;
    if (method === 'onchain') {
      expect(c.onchain_address).toMatch(/^bc1q[02-9ac-hj-np-z]{38}$/);
      expect(c.bip21_uri).toBe(`bitcoin:${c.onchain_address}?amount=0.00025000`);
      expect(Object.keys(c.qr_codes)).toEqual(['onchain']);
      expect(payment).toMatchObject({ onchain_address: c.onchain_address });
      expect(payment.amount_fiat ?? null).toBeNull();
    } else {
      // The dev processors' page: the plan's checkout page, following this payment, in its test mode.
      expect(c.checkout_url).toBe(`http://pay.example.test/subscriptions_manager/checkout/${plan.id}?payment=${c.payment_id}&processor=dev`);
      // 25 000 sats at 80 000 EUR per bitcoin.
      expect(payment).toMatchObject({ amount_fiat: 20, currency: 'eur', payment_method: method, status: 'pending' });
    }
    expect((await anon().post(`/dev/payments/${c.payment_id}/pay`)).status).toBe(200);
    const sub = await until(
      async () => (await admin.get(`/subscriptions/${c.subscription_id}`)).body,
      (s) => s.status === 'active',
    );
    expect(sub).toMatchObject({ status: 'active', payment_method: method });
  });

  it('checkouts of a new contact on different methods at once answer like one after another (found from outside)', async () => {
    const plan = (await admin.post('/plans', { name: 'Chosen again', amount_sats: 25_000, interval: 'monthly', ...everyRail })).body;
    const methods = ['lightning', 'walletproc', 'card'];
    for (let round = 0; round < 30; round++) {
      const email = `race-${round}@example.com`;
      const answers = await Promise.all(methods.map((payment_method) => anon().post('/public/subscribe', { plan_id: plan.id, payment_method, email })));
      // Each one a checkout of its own, as when sent one after another: each new method replaces the unpaid one.
      expect(
        answers.map((a) => a.status),
        `round ${round}: ${answers.map((a) => a.body.detail ?? a.body.payment_method).join(' | ')}`,
      ).toEqual([201, 201, 201]);
      expect(answers.map((a) => a.body.payment_method)).toEqual(['lightning', 'walletproc', 'cardproc']);
      expect(new Set(answers.map((a) => a.body.subscription_id)).size).toBe(3);
      // One live subscription is left (the last checkout to commit), and only its payment can still be paid.
      const { rows: live } = await db.query(
        `SELECT s.id, s.status FROM billing.subscriptions s JOIN billing.subscribers b ON b.id = s.subscriber_id
          WHERE s.plan_id = $1 AND b.email = $2 AND s.status <> 'expired'`,
        [plan.id, email],
      );
      expect(live, `round ${round}`).toEqual([{ id: expect.any(String), status: 'pending' }]);
      const ours = answers.find((a) => a.body.subscription_id === live[0].id);
      expect(ours, `round ${round}`).toBeDefined();
      const { rows: open } = await db.query(
        `SELECT id, subscription_id FROM payments.payments WHERE plan_id = $1 AND status = 'pending' AND subscription_id = ANY($2)`,
        [plan.id, answers.map((a) => a.body.subscription_id)],
      );
      expect(open, `round ${round}`).toEqual([{ id: ours!.body.payment_id, subscription_id: live[0].id }]);
    }
  });

  it('a card renewal goes out with a fresh checkout link and its fiat amount', async () => {
    const plan = (await admin.post('/plans', { name: 'Card trial', amount_sats: 50_000, interval: 'weekly', trial_days: 3, ...everyRail })).body;
    const s = (await anon().post('/public/subscribe', { plan_id: plan.id, payment_method: 'card', email: 'renew-card@example.com' })).body;
    const sub = (await admin.get(`/subscriptions/${s.subscription_id}`)).body;
    const now = (await admin.post('/dev/clock', {})).body.now;
    expect((await admin.post('/dev/clock', { advance_seconds: sub.current_period_end - DAY / 2 - now })).status).toBe(200);
    const { rows } = await db.query(
      `SELECT payload->'data' AS d FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = $1`,
      [s.subscription_id],
    );
    expect(rows).toHaveLength(1);
    const reminder = rows[0].d;
    expect(reminder).toMatchObject({ payment_method: 'cardproc', amount_fiat: 40, currency: 'eur', due_at: sub.current_period_end });
    expect(reminder.checkout_url).toBe(`http://pay.example.test/subscriptions_manager/checkout/${plan.id}?payment=${reminder.payment_id}&processor=dev`);
    expect((await anon().post(`/dev/payments/${reminder.payment_id}/pay`)).status).toBe(200);
    const renewed = await until(
      async () => (await admin.get(`/subscriptions/${s.subscription_id}`)).body,
      (x) => x.current_period_start === sub.current_period_end,
    );
    expect(renewed).toMatchObject({ status: 'active', current_period_end: sub.current_period_end + 7 * DAY });
  });
});
