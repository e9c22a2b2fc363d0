import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStripeServer, type StripeServer } from '../services/payments/test/support/stripe-server.js';
import { stripeEnv } from './support/stripe.js';
import { call, client, until } from './support/http.js';
import { startSmtpServer } from './support/smtp-server.js';
import { startStack, type Stack } from './support/stack.js';
import { expectEventsMatchSchemas, expectNoSecretAtRest } from './support/contract.js';
import { devClock } from './support/clock.js';

/** Card checkout through Stripe Checkout (a local server speaking its API), settled only by signed webhook events via the gateway. */
let stack: Stack;
let stripe: StripeServer;
let db: Stack['db'];
let smtp: Awaited<ReturnType<typeof startSmtpServer>>;

beforeAll(async () => {
  stripe = await startStripeServer({ accounts: ['acct_1Connected'] });
  smtp = await startSmtpServer('mailer', 'mail-pass');
  stack = await startStack({
    wallets: 1,
    env: {
      SMTP_URL: smtp.url,
      MAIL_FROM: 'Billing <billing@example.com>',
      NOTIFIER_POLL_INTERVAL_MS: '150',
      ...stripeEnv(stripe),
      FIAT_RATE_FIXED: '50000',
      FIAT_CURRENCY: 'eur',
      PUBLIC_BASE_URL: 'http://pay.example.test',
      // Only webhook events may settle here: the sweeper's provider polling is pushed out of the way.
      PAYMENTS_SWEEP_INTERVAL_MS: '600000',
    },
  });
  db = stack.db;
});
afterAll(async () => {
  await stack?.stop();
  await stripe?.close();
  await smtp?.stop();
});

const owner = () => client(stack.api, stack.wallets[0]!.invoice_key);
const now = () => Math.floor(Date.now() / 1000);

async function cardPlan(name: string, extra: object = {}) {
  const res = await client(stack.api, stack.wallets[0]!.admin_key).post('/plans', {
    name,
    amount_sats: 2100,
    interval: 'monthly',
    allow_cardproc: true,
    ...extra,
  });
  expect(res.status).toBe(201);
  return res.body;
}

async function checkout(email: string, plan?: { id: string }) {
  plan ??= await cardPlan(`Card ${email}`);
  const res = await client(stack.api).post('/public/subscribe', { plan_id: plan.id, payment_method: 'card', email });
  expect(res.status).toBe(201);
  const session = [...stripe.sessions.values()].find((s) => s.metadata.payment_id === res.body.payment_id)!;
  expect(session).toBeTruthy();
  return { c: res.body, session };
}

/** A card checkout paid at Stripe and confirmed by its signed event: its subscription, once active. */
async function activeCardSubscription(email: string, plan: { id: string }) {
  const { c, session } = await checkout(email, plan);
  stripe.pay(session.id);
  expect((await deliver(stripe.eventJson('checkout.session.completed', session.id))).status).toBe(200);
  const sub = await until(
    async () => (await owner().get(`/subscriptions/${c.subscription_id}`)).body,
    (s) => s.status === 'active',
  );
  expect(sub.status).toBe('active');
  return { c, sub };
}

/** One webhook delivery as Stripe makes it: the JSON text and its Stripe-Signature header. */
function deliver(payload: string, signature: string | null = stripe.sign(payload)) {
  return call(stack.api, 'POST', '/public/webhook/cardproc', { raw: payload, headers: signature === null ? {} : { 'Stripe-Signature': signature } });
}

const count = async (sql: string, params: unknown[]) => (await db.query(sql, params)).rows[0].n as number;
const receivedEvents = (subId: string, event = 'payment.received') =>
  count(`SELECT count(*)::int AS n FROM payments.outbox WHERE payload->>'event' = $2 AND payload->'data'->>'subscription_id' = $1`, [subId, event]);
const recorded = (paymentId: string) =>
  count(`SELECT count(*)::int AS n FROM payments.processed_callbacks WHERE provider = 'stripe' AND payment_id = $1`, [paymentId]);

describe('card processor (Stripe) checkout', () => {
  it('checkout opens a Stripe session priced in the fiat currency; GET /payments/{id} shows amount_fiat and currency', async () => {
    const plan = await cardPlan('Card priced');
    const { c, session } = await checkout('priced@example.com', plan);
    expect(c).toMatchObject({ payment_method: 'cardproc', checkout_url: session.url, payment_request: null });
    expect(c.checkout_url).toMatch(/^https:\/\/checkout\.stripe\.com\/c\/pay\/cs_test_/);
    // 2100 sats at 50 000 EUR/BTC = 1.05 EUR = 105 cents; the checkout and the public plan say so.
    expect(c).toMatchObject({ amount_fiat: 1.05, currency: 'eur' });
    expect((await client(stack.api).get(`/public/plan/${plan.id}`)).body.fiat_price).toEqual({ amount: 1.05, currency: 'eur' });
    expect(session.params).toMatchObject({
      mode: 'payment',
      line_items: [{ quantity: '1', price_data: { currency: 'eur', unit_amount: '105' } }],
      metadata: { payment_id: c.payment_id, subscription_id: c.subscription_id },
      client_reference_id: c.payment_id,
      // Back to the checkout page, which follows the payment.
      success_url: `http://pay.example.test/subscriptions_manager/checkout/${plan.id}?payment=${c.payment_id}`,
      cancel_url: `http://pay.example.test/subscriptions_manager/checkout/${plan.id}?payment=${c.payment_id}`,
    });
    expect(session.expires_at - now()).toBeGreaterThan(23 * 3600);
    expect(session.expires_at - now()).toBeLessThanOrEqual(24 * 3600);
    expect(c.expires_at).toBe(session.expires_at);
    const p = (await owner().get(`/payments/${c.payment_id}`)).body;
    expect(p).toMatchObject({ status: 'pending', payment_method: 'cardproc', amount_fiat: 1.05, currency: 'eur', cardproc_payment_id: null });
  });

  it('forged, wrongly signed, stale or malformed events are 400, genuine events of no session of ours 200, and both change nothing; the signed completed event 10 times activates once', async () => {
    const { c, session } = await checkout('paid@example.com');
    const subOf = async () => (await owner().get(`/subscriptions/${c.subscription_id}`)).body;
    stripe.pay(session.id);
    const payload = stripe.eventJson('checkout.session.completed', session.id);
    const event = JSON.parse(payload);
    const resigned = (o: object) => JSON.stringify(o);
    const foreign = resigned({ ...event, data: { object: { ...event.data.object, id: 'cs_test_someoneelse' } } });
    const unknownPayment = resigned({ ...event, data: { object: { ...event.data.object, metadata: { payment_id: 'pay_nope' } } } });
    const bad: [string, string | null][] = [
      [payload.replace('"payment_status": "paid"', '"payment_status": "paid" '), stripe.sign(payload)], // body changed after signing
      [payload, stripe.sign(payload, { secret: 'whsec_notours' })],
      [payload, stripe.sign(payload, { timestamp: now() - 400 })],
      [payload, stripe.sign(payload, { timestamp: now() + 400 })], // from the future: refused as stale ones are
      [payload, null],
      [payload, 'garbage'],
      ['{"id": "evt_1", "type": ', stripe.sign('{"id": "evt_1", "type": ')],
      // Signed, but not an event at all (found from outside: `null` was a 500).
      ...['null', '[]', '"text"', '7', '{"id": "evt_2"}', '{"id": 2, "type": "checkout.session.completed"}'].map((b): [string, string] => [b, stripe.sign(b)]),
      // Our session's genuine event under an id that could not be recorded.
      ...[resigned({ ...event, id: 'evt_\u0000' })].map((b): [string, string] => [b, stripe.sign(b)]),
    ];
    for (const [body, sig] of bad) {
      const r = await deliver(body, sig);
      expect(r.status, `${body.slice(0, 30)} / ${sig}`).toBe(400);
      expect(r.body.detail).toBe('Invalid callback');
    }
    // Signed by Stripe but about a session that is not ours (another integration on the account): acknowledged,
    // so Stripe stops retrying, and not recorded (they carry the genuine event's id, which must still apply below).
    // Signed but without a session in it (found from outside: a 500): acknowledged like those.
    const objectless = [resigned({ ...event, data: { object: null } }), resigned({ id: event.id, type: event.type, object: 'event' })];
    // A payment id no payment can have (found from outside: NUL reached the database, a 500).
    const unstorable = ['\u0000', 'pay_\ud800'].map((id) =>
      resigned({ ...event, type: 'checkout.session.async_payment_failed', data: { object: { ...event.data.object, metadata: { payment_id: id } } } }),
    );
    for (const body of [foreign, unknownPayment, ...objectless, ...unstorable]) {
      const r = await deliver(body);
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ received: true });
    }
    expect((await owner().get(`/payments/${c.payment_id}`)).body.status).toBe('pending');
    expect(await recorded(c.payment_id)).toBe(0);
    expect(await count(`SELECT count(*)::int AS n FROM payments.processed_callbacks WHERE event_id = $1`, [event.id])).toBe(0);
    expect(await receivedEvents(c.subscription_id)).toBe(0);

    // An event type we do not act on is acknowledged and ignored.
    const other = resigned({ ...event, id: 'evt_other_type', type: 'payment_intent.succeeded' });
    expect((await deliver(other)).status).toBe(200);
    expect(await recorded(c.payment_id)).toBe(0);

    // Stripe re-signs each retry; some arrive together.
    for (let i = 0; i < 4; i++) expect((await deliver(payload)).status).toBe(200);
    const together = await Promise.all(Array.from({ length: 6 }, () => deliver(payload)));
    for (const r of together) expect(r.status).toBe(200);

    const sub = await until(subOf, (s) => s.status === 'active');
    expect(sub.status).toBe('active');
    expect(sub.payments).toHaveLength(1);
    const p = (await owner().get(`/payments/${c.payment_id}`)).body;
    expect(p).toMatchObject({ status: 'paid', cardproc_payment_id: stripe.sessions.get(session.id)!.payment_intent });
    expect(p.cardproc_payment_id).toMatch(/^pi_/);
    expect(await receivedEvents(c.subscription_id)).toBe(1);
    expect(await recorded(c.payment_id)).toBe(1);
    expect(await count('SELECT count(*)::int AS n FROM billing.applied_payments WHERE subscription_id = $1', [c.subscription_id])).toBe(1);
    expect(
      await count(
        `SELECT count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'subscription.activated' AND payload->'data'->>'subscription_id' = $1`,
        [c.subscription_id],
      ),
    ).toBe(1);
  });

  it('the receipt mailed to the subscriber says what the card was charged, with the sats beside it (found from outside)', async () => {
    const { c, session } = await checkout('receipt@example.com');
    stripe.pay(session.id);
    expect((await deliver(stripe.eventJson('checkout.session.completed', session.id))).status).toBe(200);
    const mail = await until(
      async () => smtp.mails.filter((m) => m.to.includes('receipt@example.com') && m.subject.includes('is active')),
      (m) => m.length > 0,
    );
    // 2100 sats at 50 000 EUR/BTC: 1.05 EUR charged to the card.
    expect(mail[0]!.text).toContain('Amount: €1.05 EUR (2,100 sats)');
    expect(mail[0]!.text).toContain('Paid with: card');
    expect(mail[0]!.text).toContain(`Payment reference: ${c.payment_id}`);
  });

  it('a delayed method: completed-but-unpaid leaves it pending, async_payment_failed fails it (subscription stays pending), async_payment_succeeded pays another', async () => {
    const plan = await cardPlan('Card async');
    const failing = await checkout('async-fail@example.com', plan);
    stripe.pay(failing.session.id, { async: true });
    expect((await deliver(stripe.eventJson('checkout.session.completed', failing.session.id))).status).toBe(200);
    expect((await owner().get(`/payments/${failing.c.payment_id}`)).body.status).toBe('pending');
    const failed = stripe.eventJson('checkout.session.async_payment_failed', failing.session.id);
    for (const r of await Promise.all([deliver(failed), deliver(failed), deliver(failed)])) expect(r.status).toBe(200);
    expect((await owner().get(`/payments/${failing.c.payment_id}`)).body.status).toBe('failed');
    expect(await receivedEvents(failing.c.subscription_id, 'payment.failed')).toBe(1);
    expect(await receivedEvents(failing.c.subscription_id)).toBe(0);
    expect((await owner().get(`/subscriptions/${failing.c.subscription_id}`)).body.status).toBe('pending');

    const paying = await checkout('async-ok@example.com', plan);
    stripe.pay(paying.session.id, { async: true });
    expect((await deliver(stripe.eventJson('checkout.session.completed', paying.session.id))).status).toBe(200);
    stripe.pay(paying.session.id);
    expect((await deliver(stripe.eventJson('checkout.session.async_payment_succeeded', paying.session.id))).status).toBe(200);
    expect((await owner().get(`/payments/${paying.c.payment_id}`)).body).toMatchObject({ status: 'paid', cardproc_payment_id: expect.stringMatching(/^pi_/) });
    const sub = await until(
      async () => (await owner().get(`/subscriptions/${paying.c.subscription_id}`)).body,
      (s) => s.status === 'active',
    );
    expect(sub.status).toBe('active');
  });

  it('checkout.session.expired expires the payment; a late expired event for a paid one changes nothing', async () => {
    const plan = await cardPlan('Card expiry');
    const { c, session } = await checkout('expire@example.com', plan);
    stripe.expire(session.id);
    const expired = stripe.eventJson('checkout.session.expired', session.id);
    expect((await deliver(expired)).status).toBe(200);
    expect((await deliver(expired)).status).toBe(200);
    expect((await owner().get(`/payments/${c.payment_id}`)).body.status).toBe('expired');
    expect(await recorded(c.payment_id)).toBe(1);

    const paid = await checkout('paid-then-expired@example.com', plan);
    stripe.pay(paid.session.id);
    expect((await deliver(stripe.eventJson('checkout.session.completed', paid.session.id))).status).toBe(200);
    expect((await deliver(stripe.eventJson('checkout.session.expired', paid.session.id))).status).toBe(200);
    expect((await owner().get(`/payments/${paid.c.payment_id}`)).body.status).toBe('paid');
  });

  it('a session paid for another amount or currency than the payment records does not pay it: acknowledged, logged, left pending', async () => {
    const plan = await cardPlan('Card amount');
    // A currency that is not a string, in an event signed with the endpoint's secret: 200, not a 500 that
    // Stripe would retry for days (found from outside).
    for (const [i, change] of [{ amount_total: 1 }, { currency: 'jpy' }, { currency: 5 }, { currency: ['eur'] }].entries()) {
      const { c, session } = await checkout(`amount-${i}@example.com`, plan);
      Object.assign(stripe.sessions.get(session.id)!, change); // changed at Stripe, or another session's numbers
      stripe.pay(session.id);
      for (const type of ['checkout.session.completed', 'checkout.session.async_payment_succeeded']) {
        expect((await deliver(stripe.eventJson(type, session.id))).status).toBe(200);
      }
      expect((await owner().get(`/payments/${c.payment_id}`)).body.status).toBe('pending');
      expect(await receivedEvents(c.subscription_id)).toBe(0);
      expect(stack.services.payments.lines.some((l) => l.includes(c.payment_id) && l.includes('callback not applied'))).toBe(true);
    }
  });

  it("a plan with a connected account: the session lives on that account and only that account's event settles it", async () => {
    const plan = await cardPlan('Card connected', { cardproc_account_id: 'acct_1Connected' });
    const { c, session } = await checkout('connected@example.com', plan);
    expect(session.account).toBe('acct_1Connected');
    expect(stripe.requests.find((r) => r.method === 'POST' && r.form.client_reference_id === c.payment_id)!.headers['stripe-account']).toBe('acct_1Connected');
    stripe.pay(session.id);
    const payload = stripe.eventJson('checkout.session.completed', session.id);
    expect(JSON.parse(payload).account).toBe('acct_1Connected');
    // The same session named on the platform account is not ours: acknowledged, changes and records nothing.
    const { account: _a, ...platform } = JSON.parse(payload);
    expect((await deliver(JSON.stringify(platform))).status).toBe(200);
    expect((await owner().get(`/payments/${c.payment_id}`)).body.status).toBe('pending');
    expect(await recorded(c.payment_id)).toBe(0);
    expect((await deliver(payload)).status).toBe(200);
    expect((await owner().get(`/payments/${c.payment_id}`)).body.status).toBe('paid');
  });

  it('cancelling the subscription expires its open Checkout Session at Stripe (on the connected account too), so the payer cannot pay it', async () => {
    const admin = client(stack.api, stack.wallets[0]!.admin_key);
    const plain = await checkout('cancel@example.com');
    const connected = await checkout('cancel-connected@example.com', await cardPlan('Card cancel connected', { cardproc_account_id: 'acct_1Connected' }));
    for (const { c, session } of [plain, connected]) {
      expect(stripe.sessions.get(session.id)!.status).toBe('open');
      const r = await admin.post(`/subscriptions/${c.subscription_id}/cancel`, { immediate: true });
      expect(r.status).toBe(200);
      expect((await owner().get(`/payments/${c.payment_id}`)).body.status).toBe('expired');
      expect(stripe.sessions.get(session.id)).toMatchObject({ status: 'expired', url: null });
      const expire = stripe.requests.find((q) => q.path === `/v1/checkout/sessions/${session.id}/expire`)!;
      expect([expire.method, expire.headers['stripe-account']]).toEqual(['POST', session.account ?? undefined]);
    }
    // Stripe then announces the expiry; it changes nothing more.
    expect((await deliver(stripe.eventJson('checkout.session.expired', plain.session.id))).status).toBe(200);
    expect((await owner().get(`/payments/${plain.c.payment_id}`)).body.status).toBe('expired');
  });

  it("a price below Stripe's minimum charge: the card checkout is 422 saying why, and another method works (found from outside: 503)", async () => {
    // 600 sats at 50,000 EUR per bitcoin: 0.30 EUR, under Stripe's 0.50 EUR.
    const plan = await cardPlan('Card too small', { amount_sats: 600 });
    const res = await client(stack.api).post('/public/subscribe', { plan_id: plan.id, payment_method: 'card', email: 'too-small@example.com' });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.detail).toEqual([
      {
        loc: ['body', 'payment_method'],
        msg: "This plan cannot be paid by card: its price, 0.30 EUR at today's rate, is below the smallest amount the card processor takes. Choose another payment method",
        type: 'value_error',
      },
    ]);
    // No checkout is left waiting for the contact: Lightning goes ahead at once.
    const ln = await client(stack.api).post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'too-small@example.com' });
    expect(ln.status, JSON.stringify(ln.body)).toBe(201);
    const subs = await db.query(`SELECT payment_method, status FROM billing.subscriptions WHERE plan_id = $1 ORDER BY created_at`, [plan.id]);
    expect(subs.rows).toEqual([
      { payment_method: 'cardproc', status: 'expired' },
      { payment_method: 'lightning', status: 'pending' },
    ]);
  });

  it('a rate source answering 500: subscribe is 503 with a clear detail, no payment, and the checkout kept pending for the retry', async () => {
    const plan = await cardPlan('Card unpriced');
    let asked = 0;
    const rates: Server = createServer((_req, res) => {
      asked++;
      res.writeHead(500, { 'content-type': 'application/json' }).end('{"status":{"error_code":500,"error_message":"oops"}}');
    });
    await new Promise<void>((r) => rates.listen(0, '127.0.0.1', () => r()));
    // Only payments prices in fiat: it alone restarts with the rate source instead of the fixed rate.
    const logs = [...stack.services.payments.lines];
    delete stack.env.FIAT_RATE_FIXED;
    stack.env.FIAT_RATE_URL = `http://127.0.0.1:${(rates.address() as AddressInfo).port}/api/v3/simple/price?ids=bitcoin&vs_currencies=eur`;
    await stack.stopPayments();
    await stack.restartPayments();
    try {
      const before = stripe.requests.length;
      const res = await client(stack.api).post('/public/subscribe', { plan_id: plan.id, payment_method: 'card', email: 'unpriced@example.com' });
      expect(res.status).toBe(503);
      expect(res.body.detail).toMatch(/exchange rate/i);
      expect(asked).toBeGreaterThan(0);
      expect(stripe.requests.length).toBe(before);
      const subs = (await db.query('SELECT status FROM billing.subscriptions WHERE plan_id = $1', [plan.id])).rows;
      // A 503: the checkout stays open for the retry it asks for (it expires unpaid after 24 h).
      expect(subs).toEqual([{ status: 'pending' }]);
      expect(await count('SELECT count(*)::int AS n FROM payments.payments WHERE plan_id = $1', [plan.id])).toBe(0);
      // The reason is logged for the operator; the Stripe secrets never are.
      logs.push(...stack.services.payments.lines);
      expect(logs.some((l) => l.includes('rate source: HTTP 500'))).toBe(true);
      expect(logs.filter((l) => l.includes(stripe.secretKey) || l.includes(stripe.webhookSecret))).toEqual([]);
      // The checkout page still gets the plan, in sats only.
      const pub = await client(stack.api).get(`/public/plan/${plan.id}`);
      expect(pub.status).toBe(200);
      expect(pub.body).not.toHaveProperty('fiat_price');
    } finally {
      await new Promise((r) => rates.close(r));
    }
  });
});

// Last before 'at rest': it moves the shared dev clock a month on.
describe('a renewal the provider ends early', () => {
  it('checkout.session.expired of the open renewal: billing issues a fresh renewal payment at once, one however often the event comes', async () => {
    // Priced at the fixed rate again (the test before pointed payments at a failing rate source).
    stack.env.FIAT_RATE_FIXED = '50000';
    delete stack.env.FIAT_RATE_URL;
    await stack.stopPayments();
    await stack.restartPayments();
    const admin = () => client(stack.api, stack.wallets[0]!.admin_key);
    const clock = devClock(admin);
    const plan = await cardPlan('Card renewal ended', { amount_sats: 21000, grace_period_days: 3 });
    const { c, sub } = await activeCardSubscription('renewal-ended@example.com', plan);
    const listed = async () => (await owner().get(`/payments?subscription_id=${c.subscription_id}&limit=50`)).body.items as { id: string; status: string }[];
    await clock.advanceTo(sub.current_period_end - 3 * 86_400 + 60);
    const [renewal] = (await until(listed, (items) => items.length === 2)).filter((p) => p.id !== c.payment_id);
    expect(renewal).toMatchObject({ status: 'pending' });
    const renewalSession = [...stripe.sessions.values()].find((s) => s.metadata.payment_id === renewal!.id)!;
    expect(renewalSession.status).toBe('open');

    // Stripe ends the session early (expired from its dashboard, say): redelivered, and sent twice at once.
    stripe.expire(renewalSession.id);
    const expired = stripe.eventJson('checkout.session.expired', renewalSession.id);
    for (const r of await Promise.all([deliver(expired), deliver(expired)])) expect(r.status).toBe(200);
    expect((await deliver(expired)).status).toBe(200);
    const items = await until(listed, (xs) => xs.some((p) => p.status === 'pending'));
    expect(items.find((p) => p.id === renewal!.id)!.status).toBe('expired');
    const fresh = items.filter((p) => p.status === 'pending');
    expect(fresh).toHaveLength(1);
    // It is payable at Stripe, and it is the subscription's renewal now.
    expect([...stripe.sessions.values()].find((s) => s.metadata.payment_id === fresh[0]!.id)?.status).toBe('open');
    // Billing names it once the payments service answered its create (the payment shows first).
    const row = await until(
      async () => (await db.query('SELECT renewal_payment_id FROM billing.subscriptions WHERE id = $1', [c.subscription_id])).rows[0],
      (r) => r.renewal_payment_id === fresh[0]!.id,
    );
    expect(row.renewal_payment_id).toBe(fresh[0]!.id);
    // Later passes make no more: one replacement for the one payment that ended.
    await new Promise((r) => setTimeout(r, 1500));
    expect((await listed()).length).toBe(3);
    expect(await count('SELECT count(*)::int AS n FROM payments.payments WHERE end_notice_at IS NOT NULL AND subscription_id = $1', [c.subscription_id])).toBe(
      0,
    );
  });
});

// After the test before (it moves the shared dev clock on).
describe('dunning of a card renewal', () => {
  it('the past-due and payment-failed notices say what the card is charged and the period it pays for, as the reminder did (found from outside)', async () => {
    const clock = devClock(() => client(stack.api, stack.wallets[0]!.admin_key));
    const plan = await cardPlan('Card dunning', { amount_sats: 21000, interval: 'weekly', grace_period_days: 1 });
    const { c, sub } = await activeCardSubscription('dunning@example.com', plan);
    const end = sub.current_period_end;
    const utc = (t: number) => `${new Date(t * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
    const mails = (subject: string) =>
      until(
        async () => smtp.mails.filter((m) => m.to.includes('dunning@example.com') && m.subject.startsWith(subject)),
        (m) => m.length > 0,
      );
    // Weekly, a day of grace: the period continues from the end if paid before the grace ends.
    const period = `Renewal period: ${utc(end)} to ${utc(end + 7 * 86_400)} if paid by ${utc(end + 86_400)}; paid later, one week from the payment.`;
    // 21,000 sats at 50 000 EUR/BTC: 10.50 EUR.
    await clock.advanceTo(end - 86_400 + 60);
    const [reminder] = await mails('Payment due for Card dunning');
    expect(reminder!.text).toContain(`renews on ${utc(end)} for €10.50 EUR (21,000 sats).\n${period}\n`);
    await clock.advanceTo(end + 60);
    const [pastDue] = await mails('Payment overdue for Card dunning');
    expect(pastDue!.text).toContain(`The renewal of Card dunning (€10.50 EUR, 21,000 sats) was not paid by the end of your period.\n${period}\n`);
    // The clock reaches at least this; the sweep may run a second before the gateway reads it back.
    const at = end + 86_400 + 60;
    await clock.advanceTo(at);
    const [failed] = await mails('Payment failed for Card dunning');
    expect(failed!.text).toContain('The renewal of Card dunning (€10.50 EUR, 21,000 sats) is unpaid, so your access has ended for now.');
    expect(failed!.text).toContain('\nRenewal period: one week, starting when you pay.\n');
    const data = (
      await db.query(
        `SELECT payload->'data' AS d FROM billing.outbox WHERE payload->>'event' = 'subscription.payment_failed' AND payload->'data'->>'subscription_id' = $1`,
        [c.subscription_id],
      )
    ).rows[0].d;
    expect(data).toMatchObject({ amount_fiat: 10.5, currency: 'eur', amount_sats: 21000 });
    expect(data.renewal_period_start).toBeGreaterThanOrEqual(at);
    expect(data.renewal_period_end - data.renewal_period_start).toBe(7 * 86_400);
  });
});

// After the tests before (they move the shared dev clock on).
describe('a card renewal the processor refuses', () => {
  const clock = devClock(() => client(stack.api, stack.wallets[0]!.admin_key));
  const refusalOf = async (subscriptionId: string) =>
    (
      await db.query('SELECT renewal_refused_for::float8, renewal_refused_at::float8, renewal_payment_id FROM billing.subscriptions WHERE id = $1', [
        subscriptionId,
      ])
    ).rows[0];
  // The subscription's Checkout Sessions asked for (the tests before left card subscriptions that renew as the clock moves too).
  const asksOf = (subscriptionId: string) =>
    stripe.requests.filter(
      (q) => q.method === 'POST' && q.path === '/v1/checkout/sessions' && (q.form.metadata as { subscription_id?: string })?.subscription_id === subscriptionId,
    ).length;
  // 2,100 sats: 1.05 EUR at 50,000 EUR per bitcoin, 0.42 EUR at 20,000 (under Stripe's 0.50 EUR).
  const ratedAt = async (rate: string) => {
    stack.env.FIAT_RATE_FIXED = rate;
    await stack.stopPayments();
    await stack.restartPayments();
  };

  it('its price under the minimum after the rate fell: the period lapses on time, the renewal is asked for daily (not at every sweep), and made once the rate allows (found from outside)', async () => {
    const plan = await cardPlan('Card refused renewal', { amount_sats: 2100, interval: 'weekly', grace_period_days: 2 });
    // The owner hears of the overdue renewal, and why (through the server's mail server).
    const settings = await client(stack.api, stack.wallets[0]!.admin_key).put(`/plans/${plan.id}/notification-settings`, {
      inherit: false,
      channels: { email: { owner_email: 'owner-refused@example.com' } },
      owner_events: ['subscription.past_due'],
    });
    expect(settings.status, JSON.stringify(settings.body)).toBe(200);
    const { c, sub } = await activeCardSubscription('refused-renewal@example.com', plan);
    const subOf = async () => (await owner().get(`/subscriptions/${c.subscription_id}`)).body;
    const end = sub.current_period_end as number;
    const row = () => refusalOf(c.subscription_id);
    const asks = () => asksOf(c.subscription_id);
    await ratedAt('20000');
    try {
      const before = asks();
      // Weekly: the renewal is asked for a day before the end, and refused (ten minutes in: the next ask
      // comes ten minutes after the end, however long the checks at the end take).
      await clock.advanceTo(end - 86_400 + 600);
      const refused = await until(row, (r) => r.renewal_refused_for === end);
      expect(refused).toMatchObject({ renewal_refused_for: end, renewal_payment_id: null });
      expect(asks()).toBe(before + 1);
      // Sweeps go on (every 300 ms here, and the clock moves): no other ask within the day.
      await clock.advance(3600);
      await new Promise((r) => setTimeout(r, 1500));
      expect(asks()).toBe(before + 1);
      // The end: past due on time, as an unpaid period (before the fix: active until the dunning window was over).
      await clock.advanceTo(end + 30);
      expect((await until(subOf, (s) => s.status === 'past_due')).status).toBe('past_due');
      const data = (
        await db.query(
          `SELECT payload->'data' AS d FROM billing.outbox WHERE payload->>'event' = 'subscription.past_due' AND payload->'data'->>'subscription_id' = $1`,
          [c.subscription_id],
        )
      ).rows[0].d;
      expect(data.renewal_refused).toMatch(/below the smallest amount the card processor takes/);
      const [told] = await until(
        async () => smtp.mails.filter((m) => m.to.includes('owner-refused@example.com')),
        (m) => m.length > 0,
      );
      // In the owner's words: no advice meant for a payer at the checkout (review finding).
      expect(told!.text).toContain(
        "No renewal invoice could be made: The renewal's price, 0.42 EUR at today's rate, is below the smallest amount the card processor takes",
      );
      expect(told!.text).not.toContain('Choose another payment method');
      const [overdue] = await until(
        async () => smtp.mails.filter((m) => m.to.includes('refused-renewal@example.com') && m.subject.startsWith('Payment overdue')),
        (m) => m.length > 0,
      );
      expect(overdue!.text).toContain('An invoice for it could not be made this time; we try again daily, and your portal will have it to pay:');
      expect(overdue!.text).not.toContain('has a payable invoice');
      expect(asks()).toBe(before + 1);
      // The rate is back: the next day's ask makes the invoice, still within the grace.
      await ratedAt('50000');
      await clock.advanceTo(refused.renewal_refused_at + 86_400 + 5);
      const made = await until(row, (r) => r.renewal_payment_id !== null);
      expect(made).toMatchObject({ renewal_refused_for: null, renewal_refused_at: null });
      expect(asks()).toBe(before + 2);
      const renewal = [...stripe.sessions.values()].find((x) => x.metadata.payment_id === made.renewal_payment_id)!;
      expect(renewal.status).toBe('open');
      expect((await subOf()).status).toBe('past_due');
    } finally {
      await ratedAt('50000');
    }
  });

  it("a resume's payment refused the same way: the resume stands, the payment is asked for again an hour later and made once the rate allows (review finding)", async () => {
    const plan = await cardPlan('Card refused resume', { amount_sats: 2100, interval: 'weekly' });
    const { c, sub } = await activeCardSubscription('refused-resume@example.com', plan);
    const admin = client(stack.api, stack.wallets[0]!.admin_key);
    expect((await admin.post(`/subscriptions/${c.subscription_id}/pause`)).status).toBe(200);
    await clock.advanceTo(sub.current_period_end + 3600);
    await ratedAt('20000');
    try {
      const before = asksOf(c.subscription_id);
      const resumed = await admin.post(`/subscriptions/${c.subscription_id}/resume`);
      expect([resumed.status, resumed.body.status]).toEqual([200, 'pending']);
      const refused = await until(
        () => refusalOf(c.subscription_id),
        (r) => r.renewal_refused_at !== null,
      );
      expect(refused).toMatchObject({ renewal_refused_for: sub.current_period_end, renewal_payment_id: null });
      expect(asksOf(c.subscription_id)).toBe(before + 1);
      // Not at every sweep.
      await clock.advance(600);
      await new Promise((r) => setTimeout(r, 1500));
      expect(asksOf(c.subscription_id)).toBe(before + 1);
      // The rate is back: an hour after the refusal, within the resume's 24 hours, the payment is made.
      await ratedAt('50000');
      await clock.advanceTo(refused.renewal_refused_at + 3600 + 5);
      const made = await until(
        () => refusalOf(c.subscription_id),
        (r) => r.renewal_payment_id !== null,
      );
      expect(made).toMatchObject({ renewal_refused_for: null, renewal_refused_at: null });
      expect(asksOf(c.subscription_id)).toBe(before + 2);
      expect((await owner().get(`/subscriptions/${c.subscription_id}`)).body.status).toBe('pending');
    } finally {
      await ratedAt('50000');
    }
  });
});

describe('at rest', () => {
  it('the Stripe keys and the API keys are stored nowhere in plain text; every event matches its schema', async () => {
    await expectNoSecretAtRest(db, {
      'provider key': [stripe.secretKey, stripe.webhookSecret],
      'API key': stack.wallets.flatMap((w) => [w.admin_key, w.invoice_key]),
    });
    await expectEventsMatchSchemas(db);
  });
});
