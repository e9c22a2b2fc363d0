import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPaypalServer, type PaypalServer, type SignedDelivery } from '../services/payments/test/support/paypal-server.js';
import { call, client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';
import { expectEventsMatchSchemas, expectNoSecretAtRest } from './support/contract.js';
import { devClock } from './support/clock.js';

/** Wallet-processor checkout through PayPal Orders v2 (a local server speaking its API), settled only by verified webhook events via the gateway. */
let stack: Stack;
let paypal: PaypalServer;
let db: Stack['db'];
const MERCHANT = 'C7CYMKZDG8D6E';

beforeAll(async () => {
  paypal = await startPaypalServer();
  stack = await startStack({
    wallets: 1,
    env: {
      WALLETPROC_PROVIDER: 'paypal',
      PAYPAL_CLIENT_ID: paypal.clientId,
      PAYPAL_CLIENT_SECRET: paypal.clientSecret,
      PAYPAL_WEBHOOK_ID: paypal.webhookId,
      PAYPAL_API_URL: paypal.url,
      FIAT_RATE_FIXED: '60000',
      FIAT_CURRENCY: 'usd',
      PUBLIC_BASE_URL: 'http://pay.example.test',
      // Only webhook events may settle here: the sweeper's provider polling is pushed out of the way.
      PAYMENTS_SWEEP_INTERVAL_MS: '600000',
    },
  });
  db = stack.db;
});
afterAll(async () => {
  await stack?.stop();
  await paypal?.close();
});

const owner = () => client(stack.api, stack.wallets[0]!.invoice_key);

async function checkout(email: string) {
  const admin = client(stack.api, stack.wallets[0]!.admin_key);
  const plan = await admin.post('/plans', {
    name: `PayPal ${email}`,
    amount_sats: 2100,
    interval: 'monthly',
    allow_walletproc: true,
    walletproc_merchant_id: MERCHANT,
  });
  expect(plan.status).toBe(201);
  const res = await client(stack.api).post('/public/subscribe', { plan_id: plan.body.id, payment_method: 'walletproc', email });
  expect(res.status).toBe(201);
  const order = [...paypal.orders.values()].find((o) => o.purchase_units[0]!.custom_id === res.body.payment_id)!;
  expect(order).toBeTruthy();
  return { c: { ...res.body, plan_id: plan.body.id as string }, orderId: order.id };
}

function deliver(d: SignedDelivery | { body: string; headers: Record<string, string> }) {
  return call(stack.api, 'POST', '/public/webhook/walletproc', { raw: d.body, headers: d.headers });
}

const count = async (sql: string, params: unknown[]) => (await db.query(sql, params)).rows[0].n as number;
const outboxEvents = (subId: string, event: string) =>
  count(`SELECT count(*)::int AS n FROM payments.outbox WHERE payload->>'event' = $2 AND payload->'data'->>'subscription_id' = $1`, [subId, event]);
const recorded = (paymentId: string) =>
  count(`SELECT count(*)::int AS n FROM payments.processed_callbacks WHERE provider = 'paypal' AND payment_id = $1`, [paymentId]);
const applied = (subId: string) => count('SELECT count(*)::int AS n FROM billing.applied_payments WHERE subscription_id = $1', [subId]);
const calls = (suffix: string) => paypal.requests.filter((r) => r.path.endsWith(suffix)).length;
const paymentRow = async (id: string) => (await db.query('SELECT status, version, failure_reason FROM payments.payments WHERE id = $1', [id])).rows[0];

describe('wallet processor (PayPal) checkout', () => {
  it('opens a PayPal order priced in fiat with the payment as custom_id; the approve link is the checkout; GET /payments/{id} shows the order', async () => {
    const { c, orderId } = await checkout('priced@example.com');
    expect(c).toMatchObject({ payment_method: 'walletproc', checkout_url: `${paypal.url}/checkoutnow?token=${orderId}`, payment_request: null });
    const order = paypal.orders.get(orderId)!;
    // 2100 sats at 60 000 USD/BTC = 1.26 USD.
    expect(order.purchase_units[0]).toMatchObject({
      custom_id: c.payment_id,
      amount: { currency_code: 'USD', value: '1.26' },
      payee: { merchant_id: MERCHANT },
    });
    // Approved or cancelled, the payer comes back to the checkout page, which follows the payment.
    const back = `http://pay.example.test/subscriptions_manager/checkout/${c.plan_id}?payment=${c.payment_id}`;
    expect(order.experience_context).toMatchObject({ return_url: back, cancel_url: back });
    expect(c.expires_at - Math.floor(Date.now() / 1000)).toBeGreaterThan(23 * 3600);
    const p = await owner().get(`/payments/${c.payment_id}`);
    expect(p.status).toBe(200);
    expect(p.body).toMatchObject({ status: 'pending', payment_method: 'walletproc', amount_fiat: 1.26, currency: 'usd', walletproc_order_id: orderId });
  });

  it('forged, header-less and malformed deliveries are 400, genuine ones about no payment of ours 200, and both change nothing; the approval captures and activates once, however often it and the capture event arrive', async () => {
    const { c, orderId } = await checkout('paid@example.com');
    const other = await checkout('other@example.com');
    const subOf = async () => (await owner().get(`/subscriptions/${c.subscription_id}`)).body;
    paypal.approve(orderId);
    const event = paypal.event('CHECKOUT.ORDER.APPROVED', orderId);
    const genuine = paypal.sign(event);
    const before = await paymentRow(c.payment_id);

    // Each of these would capture the approved order if it got through.
    const altered = { ...genuine, body: JSON.stringify({ ...event, id: 'WH-FORGED' }) };
    const forgedSig = { ...genuine, headers: { ...genuine.headers, 'paypal-transmission-sig': Buffer.from('x'.repeat(256)).toString('base64') } };
    const otherHook = paypal.sign(event, 'SOMEOTHERHOOK12');
    for (const d of [altered, forgedSig, otherHook]) {
      const r = await deliver(d);
      expect(r.status).toBe(400);
      expect(r.body.detail).toBe('Invalid callback');
    }

    // Refused without asking PayPal: a missing PAYPAL-* header, a body that is not a JSON event.
    const verifications = calls('/verify-webhook-signature');
    for (const h of Object.keys(genuine.headers).filter((k) => k !== 'paypal-auth-version')) {
      const headers = { ...genuine.headers };
      delete headers[h];
      expect((await deliver({ body: genuine.body, headers })).status, h).toBe(400);
    }
    for (const body of ['{"id": "WH-1", "event_type": ', '[]', '"text"', JSON.stringify({ id: 'WH-2', event_type: 'PAYMENT.CAPTURE.COMPLETED' })]) {
      expect((await deliver({ body, headers: genuine.headers })).status, body).toBe(400);
    }
    expect(calls('/verify-webhook-signature')).toBe(verifications);

    // Signed by PayPal but not about a payment of ours (another integration on the account; our order under
    // another payment's custom_id): acknowledged so PayPal stops retrying, neither captured nor recorded.
    const mixed = paypal.sign({
      ...event,
      id: 'WH-MIXED',
      resource: { ...(event.resource as object), purchase_units: [{ ...(event.resource as any).purchase_units[0], custom_id: other.c.payment_id }] },
    });
    const stranger = paypal.sign({ ...event, id: 'WH-STRANGER', resource: { ...(event.resource as object), id: 'NOTOURORDER12345' } });
    // Ids no payment or order of ours can have (found from outside at the card webhook: NUL reached the database, a 500).
    const unstorable = [
      paypal.sign({ ...event, id: 'WH-NUL-ORDER', resource: { ...(event.resource as object), id: 'ORDER\u0000' } }),
      paypal.sign({ id: 'WH-NUL-CAPTURE', event_type: 'PAYMENT.CAPTURE.COMPLETED', resource: { id: 'CAP1', custom_id: '\u0000' } }),
    ];
    for (const d of [mixed, stranger, ...unstorable]) {
      const r = await deliver(d);
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ received: true });
    }
    expect(await count(`SELECT count(*)::int AS n FROM payments.processed_callbacks WHERE event_id IN ('WH-MIXED', 'WH-STRANGER')`, [])).toBe(0);

    expect(paypal.orders.get(orderId)!.status).toBe('APPROVED'); // never captured
    expect(await paymentRow(c.payment_id)).toEqual(before);
    expect(await recorded(c.payment_id)).toBe(0);
    expect(await outboxEvents(c.subscription_id, 'payment.received')).toBe(0);
    expect((await subOf()).status).not.toBe('active');

    // The genuine approval: captured at PayPal, then recorded.
    const approved = await deliver(genuine);
    expect(approved.status).toBe(200);
    expect(approved.body).toEqual({ received: true });
    expect(paypal.orders.get(orderId)!.status).toBe('COMPLETED');
    expect((await owner().get(`/payments/${c.payment_id}`)).body).toMatchObject({ status: 'paid', walletproc_order_id: orderId });
    const sub = await until(subOf, (s) => s.status === 'active');
    expect(sub.status).toBe('active');

    // Replays of the same event (as sent, and re-signed as PayPal's retries are) change nothing and capture nothing.
    const captures = calls('/capture');
    for (const d of [genuine, paypal.sign(event), genuine]) expect((await deliver(d)).status).toBe(200);
    expect(calls('/capture')).toBe(captures);
    expect(await recorded(c.payment_id)).toBe(1);

    // A capture event naming our payment but another order is not ours: acknowledged, ignored, not recorded.
    const completed = paypal.event('PAYMENT.CAPTURE.COMPLETED', orderId);
    const wrongOrder = paypal.sign({
      ...completed,
      id: 'WH-WRONGORDER',
      resource: { ...(completed.resource as object), supplementary_data: { related_ids: { order_id: other.orderId } } },
    });
    expect((await deliver(wrongOrder)).status).toBe(200);
    expect(await count(`SELECT count(*)::int AS n FROM payments.processed_callbacks WHERE event_id = 'WH-WRONGORDER'`, [])).toBe(0);

    // PAYMENT.CAPTURE.COMPLETED for the same order, delivered 10 times, some together.
    for (let i = 0; i < 4; i++) expect((await deliver(paypal.sign(completed))).status).toBe(200);
    const together = await Promise.all(Array.from({ length: 6 }, () => deliver(paypal.sign(completed))));
    for (const r of together) expect(r.status).toBe(200);

    // An event type we do not act on is acknowledged and ignored.
    expect((await deliver(paypal.sign({ ...completed, id: 'WH-REFUND', event_type: 'PAYMENT.CAPTURE.REFUNDED' }))).status).toBe(200);

    await until(
      () => applied(c.subscription_id),
      (n) => n >= 1,
    );
    await new Promise((r) => setTimeout(r, 1000)); // room for a wrongly repeated application to show up
    expect(await applied(c.subscription_id)).toBe(1);
    expect(await outboxEvents(c.subscription_id, 'payment.received')).toBe(1);
    expect(
      await count(
        `SELECT count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'subscription.activated' AND payload->'data'->>'subscription_id' = $1`,
        [c.subscription_id],
      ),
    ).toBe(1);
    expect(await recorded(c.payment_id)).toBe(2);
    const final = await subOf();
    expect(final).toMatchObject({ status: 'active', payment_method: 'walletproc' });
    expect(final.payments).toHaveLength(1);
    // The other checkout was never touched.
    expect((await paymentRow(other.c.payment_id)).status).toBe('pending');
  });

  it('an order approved after we expired its payment (subscription cancelled) is never captured: no money is taken', async () => {
    const { c, orderId } = await checkout('cancelled@example.com');
    const cancel = await client(stack.api, stack.wallets[0]!.admin_key).post(`/subscriptions/${c.subscription_id}/cancel`, { immediate: true });
    expect(cancel.status).toBe(200);
    expect((await paymentRow(c.payment_id)).status).toBe('expired');

    paypal.approve(orderId); // the payer still had the PayPal page open
    const approval = paypal.sign(paypal.event('CHECKOUT.ORDER.APPROVED', orderId));
    const captures = calls('/capture');
    for (let i = 0; i < 2; i++) expect((await deliver(approval)).status).toBe(200);
    expect(calls('/capture')).toBe(captures);
    expect(paypal.orders.get(orderId)!.status).toBe('APPROVED'); // PayPal voids it once the capture window ends
    expect((await paymentRow(c.payment_id)).status).toBe('expired');
    expect(await outboxEvents(c.subscription_id, 'payment.received')).toBe(0);
    expect(stack.services.payments.lines.some((l) => l.includes(c.payment_id) && l.includes('approved order of an expired payment left uncaptured'))).toBe(
      true,
    );
  });

  it('a pending capture that PayPal then denies fails the payment; the subscription does not activate; PayPal unreachable is 503', async () => {
    const { c, orderId } = await checkout('denied@example.com');
    paypal.approve(orderId, 'PENDING'); // e.g. an eCheck: captured, not yet cleared
    expect((await deliver(paypal.sign(paypal.event('CHECKOUT.ORDER.APPROVED', orderId)))).status).toBe(200);
    expect(paypal.orders.get(orderId)!.status).toBe('COMPLETED');
    expect((await owner().get(`/payments/${c.payment_id}`)).body.status).toBe('pending');

    paypal.settleCapture(orderId, 'DECLINED');
    const denied = paypal.sign(paypal.event('PAYMENT.CAPTURE.DENIED', orderId));
    paypal.faults.status = 503;
    try {
      const r = await deliver(denied);
      expect(r.status).toBe(503);
    } finally {
      delete paypal.faults.status;
    }
    expect((await paymentRow(c.payment_id)).status).toBe('pending');

    for (let i = 0; i < 3; i++) expect((await deliver(denied)).status).toBe(200);
    const row = await paymentRow(c.payment_id);
    expect(row).toMatchObject({ status: 'failed', failure_reason: 'paypal: PAYMENT.CAPTURE.DENIED' });
    expect((await owner().get(`/payments/${c.payment_id}`)).body.status).toBe('failed');
    expect(await outboxEvents(c.subscription_id, 'payment.failed')).toBe(1);
    expect(await outboxEvents(c.subscription_id, 'payment.received')).toBe(0);
    await new Promise((r) => setTimeout(r, 1000));
    expect((await owner().get(`/subscriptions/${c.subscription_id}`)).body.status).not.toBe('active');
    expect(await applied(c.subscription_id)).toBe(0);
  });

  it('a capture event or a captured order for another amount or currency does not pay the payment: acknowledged, logged, left pending', async () => {
    // A genuine capture elsewhere, re-aimed by its sender at a 1.26 USD payment whose order the payer never approved.
    const paid = await checkout('amount-elsewhere@example.com');
    paypal.approve(paid.orderId);
    expect((await deliver(paypal.sign(paypal.event('CHECKOUT.ORDER.APPROVED', paid.orderId)))).status).toBe(200);
    const victim = await checkout('amount-victim@example.com');
    expect(paypal.orders.get(victim.orderId)!.status).toBe('PAYER_ACTION_REQUIRED');
    const forged = paypal.event('PAYMENT.CAPTURE.COMPLETED', paid.orderId) as { resource: Record<string, any> };
    forged.resource = {
      ...forged.resource,
      amount: { currency_code: 'JPY', value: '1' },
      custom_id: victim.c.payment_id,
      supplementary_data: { related_ids: { order_id: victim.orderId } },
    };
    for (let i = 0; i < 2; i++) expect((await deliver(paypal.sign(forged))).status).toBe(200);
    expect((await paymentRow(victim.c.payment_id)).status).toBe('pending');

    // The order itself changed at PayPal to another price before the payer approved it: captured, not ours.
    const changed = await checkout('amount-changed@example.com');
    paypal.orders.get(changed.orderId)!.purchase_units[0]!.amount = { currency_code: 'JPY', value: '1' };
    paypal.approve(changed.orderId);
    expect((await deliver(paypal.sign(paypal.event('CHECKOUT.ORDER.APPROVED', changed.orderId)))).status).toBe(200);
    expect(paypal.orders.get(changed.orderId)!.status).toBe('COMPLETED');
    expect((await deliver(paypal.sign(paypal.event('PAYMENT.CAPTURE.COMPLETED', changed.orderId)))).status).toBe(200);
    expect((await paymentRow(changed.c.payment_id)).status).toBe('pending');
    for (const c of [victim.c, changed.c]) expect(await outboxEvents(c.subscription_id, 'payment.received')).toBe(0);
    const warned = stack.services.payments.lines.filter((l) => l.includes(changed.c.payment_id) && l.includes('callback not applied'));
    expect(warned.length).toBeGreaterThan(0);
    expect(warned[0]).toContain('captured 1 JPY, the payment is 1.26 USD');
  });
});

// Last before 'at rest': it moves the shared dev clock a month on.
describe('a renewal PayPal ends early', () => {
  it('PAYMENT.CAPTURE.DENIED of the open renewal: billing issues a fresh renewal payment at once, one however often the event comes', async () => {
    const admin = () => client(stack.api, stack.wallets[0]!.admin_key);
    const clock = devClock(admin);
    const plan = await admin().post('/plans', {
      name: 'PayPal renewal denied',
      amount_sats: 21000,
      interval: 'monthly',
      grace_period_days: 3,
      allow_walletproc: true,
      walletproc_merchant_id: MERCHANT,
    });
    expect(plan.status).toBe(201);
    const res = await client(stack.api).post('/public/subscribe', { plan_id: plan.body.id, payment_method: 'walletproc', email: 'renewal-denied@example.com' });
    expect(res.status).toBe(201);
    const orderOf = (paymentId: string) => [...paypal.orders.values()].find((o) => o.purchase_units[0]!.custom_id === paymentId);
    const first = orderOf(res.body.payment_id)!;
    paypal.approve(first.id);
    expect((await deliver(paypal.sign(paypal.event('CHECKOUT.ORDER.APPROVED', first.id)))).status).toBe(200);
    const sub = await until(
      async () => (await owner().get(`/subscriptions/${res.body.subscription_id}`)).body,
      (s) => s.status === 'active',
    );
    expect(sub.status).toBe('active');
    const listed = async () => (await owner().get(`/payments?subscription_id=${sub.id}&limit=50`)).body.items as { id: string; status: string }[];
    await clock.advanceTo(sub.current_period_end - 3 * 86_400 + 60);
    const [renewal] = (await until(listed, (items) => items.length === 2)).filter((p) => p.id !== res.body.payment_id);
    expect(renewal).toMatchObject({ status: 'pending' });
    const order = orderOf(renewal!.id)!;

    // The payer approves; the capture stays pending, then PayPal denies it.
    paypal.approve(order.id, 'PENDING');
    expect((await deliver(paypal.sign(paypal.event('CHECKOUT.ORDER.APPROVED', order.id)))).status).toBe(200);
    paypal.settleCapture(order.id, 'DECLINED');
    const denied = paypal.sign(paypal.event('PAYMENT.CAPTURE.DENIED', order.id));
    for (const r of await Promise.all([deliver(denied), deliver(denied)])) expect(r.status).toBe(200);
    expect((await deliver(denied)).status).toBe(200);
    const items = await until(listed, (xs) => xs.some((p) => p.status === 'pending'));
    expect(items.find((p) => p.id === renewal!.id)!.status).toBe('failed');
    const fresh = items.filter((p) => p.status === 'pending');
    expect(fresh).toHaveLength(1);
    expect(orderOf(fresh[0]!.id)?.status).toBe('PAYER_ACTION_REQUIRED');
    // Billing names it once the payments service answered its create (the payment shows first).
    const row = await until(
      async () => (await db.query('SELECT renewal_payment_id FROM billing.subscriptions WHERE id = $1', [sub.id])).rows[0],
      (r) => r.renewal_payment_id === fresh[0]!.id,
    );
    expect(row.renewal_payment_id).toBe(fresh[0]!.id);
    // The owner hears of the declined payment once; later passes make no more replacements.
    expect(await outboxEvents(sub.id, 'payment.failed')).toBe(1);
    await new Promise((r) => setTimeout(r, 1500));
    expect((await listed()).length).toBe(3);
  });
});

describe('at rest', () => {
  it('the PayPal client secret and the API keys are stored nowhere in plain text; every event matches its schema', async () => {
    await expectNoSecretAtRest(db, {
      'provider key': [paypal.clientSecret],
      'API key': stack.wallets.flatMap((w) => [w.admin_key, w.invoice_key]),
    });
    await expectEventsMatchSchemas(db);
  });
});
