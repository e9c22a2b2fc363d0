import { setTimeout as sleep } from 'node:timers/promises';
import { createHash } from 'node:crypto';
import { decode } from 'light-bolt11-decoder';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { messages, type CreatePayment } from '@sb/contracts';
import { BusClient, callMessage, createBusServer, DomainError, messageHandler, systemClock, unavailable } from '@sb/runtime';
import { PaymentsRepo } from '../src/store/payments.repo.js';
import { ChargeprocProvider } from '../src/providers/chargeproc.js';
import { Sweeper } from '../src/sweeper.js';
import { PUBLIC_CHECK_INTERVAL_MS } from '../src/check-gate.js';
import { lightningRail } from '../src/providers/rail.js';
import { RateSource } from '../src/rates.js';
import { callback, startPaymentsService, type PaymentsService } from './support/service.js';
import { startEsploraServer, type EsploraServer } from './support/esplora-server.js';
import { startSatspayServer, type SatspayServer } from './support/satspay-server.js';
import { startStripeServer, type StripeServer } from './support/stripe-server.js';
import { stripeEnv } from '../../../test/support/stripe.js';

const WALLET = 'wal_test_a';
const OTHER_WALLET = 'wal_test_b';
let seq = 0;
const now = () => Math.floor(Date.now() / 1000);

function createRequest(over: Partial<CreatePayment> = {}): CreatePayment {
  seq++;
  return {
    wallet_id: WALLET,
    subscription_id: `sub_test_${seq}`,
    plan_id: 'plan_gold',
    plan_name: 'Gold',
    amount_sats: 21_000,
    payment_method: 'lightning',
    purpose: 'checkout',
    description: 'Gold (monthly)',
    expires_at: now() + 3600,
    idempotency_key: `checkout:${seq}:${Math.random()}`,
    ...over,
  };
}

async function rejection(p: Promise<unknown>): Promise<DomainError> {
  const err = await p.then(
    () => undefined,
    (e) => e,
  );
  if (!(err instanceof DomainError)) throw new Error(`expected a DomainError, got ${err}`);
  return err;
}

async function paymentRow(s: PaymentsService, id: string) {
  const { rows } = await s.db.query('SELECT * FROM payments.payments WHERE id = $1', [id]);
  return rows[0];
}

async function outboxCount(s: PaymentsService, paymentId: string): Promise<number> {
  const { rows } = await s.db.query(`SELECT count(*)::int AS n FROM payments.outbox WHERE payload->'data'->>'payment_id' = $1`, [paymentId]);
  return rows[0].n;
}

async function receivedEvents(s: PaymentsService, paymentId: string) {
  await s.outboxDrained();
  return (await s.events()).filter((e) => e.event.data.payment_id === paymentId);
}

async function waitUntil(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what} not within ${ms} ms`);
}

describe('payments service, dev provider (DEV_MODE)', () => {
  let s: PaymentsService;
  const pay = (id: string) => s.route('payments.dev.pay', { params: { id } });

  beforeAll(async () => {
    s = await startPaymentsService({ DEV_MODE: '1', LIGHTNING_PROVIDER: 'dev', PAYMENTS_SWEEP_INTERVAL_MS: '500' });
  });
  afterAll(() => s?.stop());

  it('creates a pending payment with a decodable invoice and a checkout, idempotently', async () => {
    const req = createRequest();
    const first = await callMessage(s.bus, messages.createPayment, req);
    expect(first.payment).toMatchObject({
      subscription_id: req.subscription_id,
      amount_sats: 21_000,
      status: 'pending',
      payment_method: 'lightning',
      paid_at: null,
    });
    expect(first.payment.id).toMatch(/^pay_[0-9a-z]{26}$/);
    const inv = decode(first.payment.payment_request!);
    expect(inv.sections.find((x) => x.name === 'amount')).toMatchObject({ value: '21000000' });
    expect(inv.sections.find((x) => x.name === 'payment_hash')).toMatchObject({ value: first.payment.payment_hash });
    expect(first.checkout).toMatchObject({
      payment_id: first.payment.id,
      payment_method: 'lightning',
      subscription_id: req.subscription_id,
      payment_request: first.payment.payment_request,
      payment_hash: first.payment.payment_hash,
      expires_at: req.expires_at,
    });
    expect(first.checkout.chargeproc_charge_id).toBeUndefined();
    expect(first.checkout.qr_codes?.lightning).toMatch(/^<svg[\s\S]*<\/svg>\s*$/);

    const again = await callMessage(s.bus, messages.createPayment, req);
    expect(again).toEqual(first);
    const racing = await Promise.all(
      Array.from({ length: 5 }, () => callMessage(s.bus, messages.createPayment, { ...req, idempotency_key: `${req.idempotency_key}:race` })),
    );
    expect(new Set(racing.map((r) => r.payment.id)).size).toBe(1);
    const { rows } = await s.db.query('SELECT count(*)::int AS n FROM payments.payments WHERE subscription_id = $1', [req.subscription_id]);
    expect(rows[0].n).toBe(2);

    const reused = await rejection(callMessage(s.bus, messages.createPayment, { ...req, subscription_id: 'sub_other' }));
    expect(reused.kind).toBe('conflict');
  });

  it('new_key skips the lookup but a key that was used after all still answers its one payment', async () => {
    const req = createRequest();
    const first = await callMessage(s.bus, messages.createPayment, { ...req, new_key: true });
    expect(first.payment.status).toBe('pending');
    // A caller wrong about its key (a retry claiming to be new), alone and racing: the stored payment, no second one.
    const again = await callMessage(s.bus, messages.createPayment, { ...req, new_key: true });
    expect(again).toEqual(first);
    const racing = await Promise.all(Array.from({ length: 4 }, () => callMessage(s.bus, messages.createPayment, { ...req, new_key: true })));
    for (const r of racing) expect(r).toEqual(first);
    const { rows } = await s.db.query('SELECT count(*)::int AS n FROM payments.payments WHERE subscription_id = $1', [req.subscription_id]);
    expect(rows[0].n).toBe(1);
    const reused = await rejection(callMessage(s.bus, messages.createPayment, { ...req, amount_sats: 1, new_key: true }));
    expect(reused.kind).toBe('conflict');
  });

  it('create_payments: a batch answers each request in order, idempotently per key, a bad request refused alone', async () => {
    const single = createRequest({ purpose: 'renewal' });
    const made = await callMessage(s.bus, messages.createPayment, single);
    const batch = [single, ...Array.from({ length: 5 }, () => createRequest({ purpose: 'renewal' }))];
    const first = await callMessage(s.bus, messages.createPayments, { payments: batch });
    expect(first.results).toHaveLength(6);
    const created = first.results.map((r) => {
      if ('error' in r) throw new Error(r.error.message);
      return r;
    });
    // A key already used answers its payment, whichever message made it.
    expect(created[0]!.payment.id).toBe(made.payment.id);
    expect(created.map((r) => r.payment.subscription_id)).toEqual(batch.map((r) => r.subscription_id));
    for (const r of created)
      expect(decode(r.payment.payment_request!).sections.find((x) => x.name === 'payment_hash')).toMatchObject({ value: r.payment.payment_hash });
    // Retried whole (a crash before billing saved it), and by two replicas at once: the same payments, none more.
    const again = await Promise.all([1, 2].map(() => callMessage(s.bus, messages.createPayments, { payments: batch })));
    for (const a of again) expect(a).toEqual(first);
    const { rows } = await s.db.query('SELECT subscription_id, count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) GROUP BY 1', [
      batch.map((r) => r.subscription_id),
    ]);
    expect(rows.map((r) => r.n)).toEqual([1, 1, 1, 1, 1, 1]);

    // Racing first calls of the same new keys: one payment per key, every answer names it.
    const fresh = Array.from({ length: 4 }, () => createRequest({ purpose: 'renewal' }));
    const raced = await Promise.all([1, 2, 3].map(() => callMessage(s.bus, messages.createPayments, { payments: fresh })));
    const ids = raced.map((r) => r.results.map((x) => ('payment' in x ? x.payment.id : x.error.message)));
    expect(ids[1]).toEqual(ids[0]);
    expect(ids[2]).toEqual(ids[0]);
    const stored = await s.db.query('SELECT count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1)', [fresh.map((r) => r.subscription_id)]);
    expect(stored.rows[0].n).toBe(4);

    // A reused key for another subscription, a method without a provider and a past expiry fail alone.
    const mixed = await callMessage(s.bus, messages.createPayments, {
      payments: [
        { ...single, subscription_id: 'sub_other' },
        createRequest({ payment_method: 'onchain' }),
        createRequest({ expires_at: now() - 5 }),
        createRequest({ purpose: 'renewal' }),
      ],
    });
    expect(mixed.results.map((r) => ('error' in r ? r.error.kind : 'ok'))).toEqual(['conflict', 'invalid', 'invalid', 'ok']);
  });

  it('a renewal payable for weeks gets an invoice of at most INVOICE_MAX_EXPIRY_S, and no QR code (it goes out in a reminder)', async () => {
    const wanted = now() + 30 * 86_400;
    const { payment, checkout } = await callMessage(s.bus, messages.createPayment, createRequest({ purpose: 'renewal', expires_at: wanted }));
    expect(checkout.expires_at).toBeGreaterThanOrEqual(now() + 86_400 - 5);
    expect(checkout.expires_at).toBeLessThanOrEqual(now() + 86_400);
    expect(Number((await paymentRow(s, payment.id)).expires_at)).toBe(checkout.expires_at);
    const inv = decode(payment.payment_request!);
    expect(inv.sections.find((x) => x.name === 'expiry')).toMatchObject({ value: 86_400 });
    expect(checkout.qr_codes).toEqual({});
  });

  it('refuses methods this version has no provider for, and an expiry in the past', async () => {
    for (const method of ['onchain', 'cardproc', 'walletproc'] as const) {
      const err = await rejection(callMessage(s.bus, messages.createPayment, createRequest({ payment_method: method })));
      expect(err.kind).toBe('invalid');
      expect(err.issues).toEqual([{ field: ['payment_method'], msg: `${method} payments are not configured on this server`, type: 'provider_not_configured' }]);
    }
    const late = await rejection(callMessage(s.bus, messages.createPayment, createRequest({ expires_at: now() - 5 })));
    expect(late.kind).toBe('invalid');
  });

  it('dev pay confirms once: status paid in the database and exactly one payment.received on JetStream', async () => {
    const req = createRequest({ purpose: 'renewal', amount_sats: 1234 });
    const { payment } = await callMessage(s.bus, messages.createPayment, req);

    const status0 = await s.route('payments.public.payment_status', { params: { id: payment.id } });
    expect(status0).toEqual({
      ok: true,
      data: { payment_id: payment.id, status: 'pending', paid_at: null, subscription_id: req.subscription_id, plan_id: req.plan_id, purpose: 'renewal' },
    });

    const reply = await pay(payment.id);
    expect(reply.ok).toBe(true);
    const paid = (reply as { data: any }).data;
    expect(paid).toMatchObject({ id: payment.id, status: 'paid' });
    expect(paid.paid_at).toBeGreaterThanOrEqual(now() - 60);

    const row = await paymentRow(s, payment.id);
    expect(row.status).toBe('paid');
    expect(Number(row.paid_at)).toBe(paid.paid_at);

    const events = await receivedEvents(s, payment.id);
    expect(events).toHaveLength(1);
    expect(events[0]!.subject).toBe('events.payment.received');
    expect(events[0]!.event).toMatchObject({ event: 'payment.received', wallet_id: WALLET });
    expect(events[0]!.event.data).toEqual({
      subscription_id: req.subscription_id,
      plan_id: 'plan_gold',
      plan_name: 'Gold',
      payment_id: payment.id,
      amount_sats: 1234,
      payment_method: 'lightning',
      purpose: 'renewal',
      status: 'paid',
      paid_at: paid.paid_at,
    });

    // Paid, not yet applied by billing: said so (applied: false), then applied once billing marks it.
    const status1 = await s.route('payments.public.payment_status', { params: { id: payment.id } });
    expect(status1).toMatchObject({ ok: true, data: { status: 'paid', paid_at: paid.paid_at, applied: false } });
    expect(await callMessage(s.bus, messages.markApplied, { wallet_id: WALLET, payment_id: payment.id })).toEqual({ marked: true });
    expect(await callMessage(s.bus, messages.markApplied, { wallet_id: WALLET, payment_id: payment.id })).toEqual({ marked: true });
    expect(await callMessage(s.bus, messages.markApplied, { wallet_id: 'wal_other', payment_id: payment.id })).toEqual({ marked: false });
    const applied = await s.route('payments.public.payment_status', { params: { id: payment.id } });
    expect(applied).toMatchObject({ ok: true, data: { status: 'paid', applied: true } });
    expect((applied as { data: object }).data).not.toHaveProperty('unapplied');
    const again = await pay(payment.id);
    expect(again).toMatchObject({ ok: true, data: { status: 'paid', paid_at: paid.paid_at } });
    expect(await outboxCount(s, payment.id)).toBe(1);
  });

  it('nwc: a dev invoice of the Lightning provider; only its own preimage confirms it, once', async () => {
    const { payment } = await callMessage(s.bus, messages.createPayment, createRequest({ payment_method: 'nwc', amount_sats: 777 }));
    expect(payment).toMatchObject({ payment_method: 'nwc', status: 'pending' });
    expect(decode(payment.payment_request!).sections.find((x) => x.name === 'payment_hash')).toMatchObject({ value: payment.payment_hash });
    const wrong = await rejection(callMessage(s.bus, messages.confirmPreimage, { payment_id: payment.id, preimage: 'ab'.repeat(32) }));
    expect(wrong.kind).toBe('invalid');
    expect((await paymentRow(s, payment.id)).status).toBe('pending');

    // The dev invoice route is how a test wallet pays: it learns the preimage, as from a real payment.
    const paid = await s.route('payments.dev.pay_invoice', { params: { payment_hash: payment.payment_hash } });
    expect(paid).toMatchObject({ ok: true, data: { payment_id: payment.id } });
    const preimage = (paid as { data: { preimage: string } }).data.preimage;
    expect(createHash('sha256').update(Buffer.from(preimage, 'hex')).digest('hex')).toBe(payment.payment_hash);
    const proven = await callMessage(s.bus, messages.confirmPreimage, { payment_id: payment.id, preimage });
    expect(proven).toEqual({ payment_id: payment.id, status: 'paid', confirmed: false });
    expect(await outboxCount(s, payment.id)).toBe(1);
    expect((await receivedEvents(s, payment.id))[0]!.event.data).toMatchObject({ payment_method: 'nwc', status: 'paid' });

    const other = await callMessage(s.bus, messages.createPayment, createRequest({ payment_method: 'nwc' }));
    const first = await callMessage(s.bus, messages.confirmPreimage, {
      payment_id: other.payment.id,
      preimage: (await paymentRow(s, other.payment.id)).dev_preimage,
    });
    expect(first).toEqual({ payment_id: other.payment.id, status: 'paid', confirmed: true });
    expect(await s.route('payments.dev.pay_invoice', { params: { payment_hash: 'cd'.repeat(32) } })).toMatchObject({ ok: false, error: { kind: 'not_found' } });
  });

  it('ten payments of one invoice at once: one confirmation, one event', async () => {
    const { payment } = await callMessage(s.bus, messages.createPayment, createRequest());
    const replies = await Promise.all(Array.from({ length: 10 }, () => pay(payment.id)));
    for (const r of replies) expect(r).toMatchObject({ ok: true, data: { id: payment.id, status: 'paid' } });
    expect(new Set(replies.map((r) => (r as { data: { paid_at: number } }).data.paid_at)).size).toBe(1);
    expect(await outboxCount(s, payment.id)).toBe(1);
    expect(await receivedEvents(s, payment.id)).toHaveLength(1);
  });

  it('dev pay: unknown id is 404', async () => {
    expect(await pay('pay_doesnotexist')).toEqual({ ok: false, error: { kind: 'not_found', message: 'Payment not found' } });
  });

  it('expireOpenPayments expires the pending payments of that subscription in that wallet only', async () => {
    const sub = `sub_expire_${Date.now()}`;
    const a = await callMessage(s.bus, messages.createPayment, createRequest({ subscription_id: sub }));
    const b = await callMessage(s.bus, messages.createPayment, createRequest({ subscription_id: sub }));
    await pay(b.payment.id);
    expect(await callMessage(s.bus, messages.expireOpenPayments, { wallet_id: OTHER_WALLET, subscription_id: sub })).toEqual({ expired: 0 });
    expect(await callMessage(s.bus, messages.expireOpenPayments, { wallet_id: WALLET, subscription_id: sub })).toEqual({ expired: 1 });
    expect(await callMessage(s.bus, messages.expireOpenPayments, { wallet_id: WALLET, subscription_id: sub })).toEqual({ expired: 0 });
    expect((await paymentRow(s, a.payment.id)).status).toBe('expired');
    expect((await paymentRow(s, b.payment.id)).status).toBe('paid');

    // With payment_id, only that one (a replaced renewal invoice); the subscription's others stay payable.
    const c = await callMessage(s.bus, messages.createPayment, createRequest({ subscription_id: sub }));
    const e = await callMessage(s.bus, messages.createPayment, createRequest({ subscription_id: sub }));
    expect(await callMessage(s.bus, messages.expireOpenPayments, { wallet_id: WALLET, subscription_id: sub, payment_id: c.payment.id })).toEqual({
      expired: 1,
    });
    expect((await paymentRow(s, c.payment.id)).status).toBe('expired');
    expect((await paymentRow(s, e.payment.id)).status).toBe('pending');
  });

  it('lists newest first, filtered and paginated, and never shows another wallet', async () => {
    const sub = `sub_list_${Date.now()}`;
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await callMessage(s.bus, messages.createPayment, createRequest({ subscription_id: sub }))).payment);
    await pay(made[1]!.id);
    const foreign = await callMessage(s.bus, messages.createPayment, createRequest({ wallet_id: OTHER_WALLET, subscription_id: sub }));

    const page = await callMessage(s.bus, messages.listSubscriptionPayments, { wallet_id: WALLET, subscription_id: sub, limit: 2, offset: 0 });
    expect(page.total).toBe(3);
    expect(page.items.map((p) => p.id)).toEqual([made[2]!.id, made[1]!.id]);
    const rest = await callMessage(s.bus, messages.listSubscriptionPayments, { wallet_id: WALLET, subscription_id: sub, limit: 2, offset: 2 });
    expect(rest.items.map((p) => p.id)).toEqual([made[0]!.id]);

    const paidOnly = await s.route('payments.payments.list', { wallet_id: WALLET, query: { subscription_id: sub, status: 'paid', limit: 50, offset: 0 } });
    expect(paidOnly).toMatchObject({ ok: true, data: { total: 1, items: [{ id: made[1]!.id, status: 'paid' }] } });
    const byMethod = await s.route('payments.payments.list', {
      wallet_id: WALLET,
      query: { subscription_id: sub, payment_method: 'lightning', limit: 50, offset: 0 },
    });
    expect((byMethod as { data: { total: number } }).data.total).toBe(3);
    const all = (await s.route('payments.payments.list', { wallet_id: WALLET, query: { limit: 200, offset: 0 } })) as {
      data: { items: { id: string; created_at: number }[] };
    };
    expect(all.data.items.map((p) => p.id)).not.toContain(foreign.payment.id);
    const ids = all.data.items.map((p) => p.id);
    expect([...ids].sort().reverse()).toEqual(ids);

    expect(await s.route('payments.payments.get', { wallet_id: WALLET, params: { id: made[0]!.id } })).toMatchObject({ ok: true, data: { id: made[0]!.id } });
    expect(await s.route('payments.payments.get', { wallet_id: OTHER_WALLET, params: { id: made[0]!.id } })).toEqual({
      ok: false,
      error: { kind: 'not_found', message: 'Payment not found' },
    });
    expect(await s.route('payments.payments.get', { wallet_id: WALLET, params: { id: 'pay_unknown' } })).toEqual({
      ok: false,
      error: { kind: 'not_found', message: 'Payment not found' },
    });
  });

  it('the sweeper expires an unpaid payment at expires_at; a late payment is still recorded once', async () => {
    const { payment } = await callMessage(s.bus, messages.createPayment, createRequest({ expires_at: now() + 2 }));
    await waitUntil(async () => (await paymentRow(s, payment.id)).status === 'expired', 15_000, 'expiry');
    expect(await outboxCount(s, payment.id)).toBe(0);
    expect(await pay(payment.id)).toMatchObject({ ok: true, data: { status: 'paid' } });
    expect(await receivedEvents(s, payment.id)).toHaveLength(1);
  });
});

describe('payments service, charge server provider (callbacks)', () => {
  let s: PaymentsService;
  let satspay: SatspayServer;
  const PUBLIC = 'https://subs.example';
  const webhook = (raw: string, method: 'GET' | 'POST' = 'POST') => s.route('payments.webhooks.chargeproc', { body: callback(raw, method) });

  beforeAll(async () => {
    satspay = await startSatspayServer();
    s = await startPaymentsService({
      DEV_MODE: '1',
      LIGHTNING_PROVIDER: 'chargeproc',
      CHARGEPROC_URL: satspay.url,
      CHARGEPROC_API_KEY: satspay.apiKey,
      CHARGEPROC_LNBITS_WALLET: satspay.wallet,
      PUBLIC_BASE_URL: PUBLIC,
      PROVIDER_TIMEOUT_MS: '15000',
      // Long enough that only callbacks and status polls confirm here; the sweeper has its own test below.
      PAYMENTS_SWEEP_INTERVAL_MS: '3600000',
    });
  });
  afterAll(async () => {
    await s?.stop();
    await satspay?.close();
  });

  async function newCharge() {
    const created = await callMessage(s.bus, messages.createPayment, createRequest({ amount_sats: 5000 }));
    const chargeId = created.checkout.chargeproc_charge_id!;
    expect(satspay.charges.get(chargeId)).toBeDefined();
    return { ...created, chargeId };
  }

  it('creates a charge at the charge server with our callback URL', async () => {
    const { payment, checkout, chargeId } = await newCharge();
    const charge = satspay.charges.get(chargeId)!;
    expect(checkout.payment_request).toBe(charge.payment_request);
    expect(payment.payment_hash).toBe(charge.payment_hash);
    const req = satspay.requests.find((r) => r.method === 'POST' && (r.body as { amount: number }).amount === 5000)!;
    expect(req.body).toMatchObject({
      lnbitswallet: satspay.wallet,
      description: 'Gold (monthly)',
      amount: 5000,
      time: 60,
      webhook: `${PUBLIC}/subscriptions_manager/api/v1/public/webhook/chargeproc`,
    });
  });

  it('forged, unknown or malformed callbacks are 400 and change nothing', async () => {
    const { payment, chargeId } = await newCharge();
    satspay.pay(chargeId);
    const bad = [
      JSON.stringify({ id: 'forged-charge-id', paid: true, balance: 5000, amount: 5000 }),
      JSON.stringify(JSON.stringify({ id: 'another-unknown' })),
      'not json',
      '',
      '[]',
      JSON.stringify({ paid: true }),
      JSON.stringify('just a string'),
    ];
    for (const raw of bad) {
      expect(await webhook(raw)).toEqual({ ok: false, error: { kind: 'rejected', message: 'Invalid callback' } });
      expect(await webhook(raw, 'GET')).toEqual({ ok: false, error: { kind: 'rejected', message: 'Invalid callback' } });
    }
    expect((await paymentRow(s, payment.id)).status).toBe('pending');
    expect(await outboxCount(s, payment.id)).toBe(0);
  });

  it('a callback for an unpaid (or underpaid) charge changes nothing', async () => {
    const { payment, chargeId } = await newCharge();
    expect(await webhook(JSON.stringify(satspay.chargeJson(chargeId)))).toEqual({ ok: true, data: { received: true } });
    satspay.pay(chargeId, 4999);
    // The body lies ("paid": true); only the charge server's own answer counts.
    const lying = { ...satspay.chargeJson(chargeId), paid: true, balance: 5000 };
    expect(await webhook(JSON.stringify(lying), 'GET')).toEqual({ ok: true, data: { received: true } });
    expect((await paymentRow(s, payment.id)).status).toBe('pending');
    expect(await outboxCount(s, payment.id)).toBe(0);
  });

  it('a paid charge announced ten times (JSON, JSON-encoded string, GET) is confirmed once, one event', async () => {
    const { payment, chargeId } = await newCharge();
    satspay.pay(chargeId);
    const charge = JSON.stringify(satspay.chargeJson(chargeId));
    const shapes = [() => webhook(charge), () => webhook(JSON.stringify(charge)), () => webhook(charge, 'GET')];
    const replies = await Promise.all(Array.from({ length: 10 }, (_, i) => shapes[i % 3]!()));
    for (const r of replies) expect(r).toEqual({ ok: true, data: { received: true } });

    const row = await paymentRow(s, payment.id);
    expect(row.status).toBe('paid');
    expect(await outboxCount(s, payment.id)).toBe(1);
    const events = await receivedEvents(s, payment.id);
    expect(events).toHaveLength(1);
    expect(events[0]!.event.data).toMatchObject({ payment_id: payment.id, amount_sats: 5000, status: 'paid', paid_at: Number(row.paid_at) });

    // A late duplicate still answers received and changes nothing.
    expect(await webhook(charge, 'GET')).toEqual({ ok: true, data: { received: true } });
    expect(await outboxCount(s, payment.id)).toBe(1);
  });

  it('a charge server that cannot be asked makes the callback 503 (so it is retried) and changes nothing', async () => {
    const { payment, chargeId } = await newCharge();
    satspay.pay(chargeId);
    satspay.faults.status = 500;
    try {
      expect(await webhook(JSON.stringify({ id: chargeId }))).toMatchObject({ ok: false, error: { kind: 'unavailable' } });
    } finally {
      delete satspay.faults.status;
    }
    expect((await paymentRow(s, payment.id)).status).toBe('pending');
    expect(await webhook(JSON.stringify({ id: chargeId }))).toEqual({ ok: true, data: { received: true } });
    expect((await paymentRow(s, payment.id)).status).toBe('paid');
  });

  it('the status poll confirms a charge the server says is paid', async () => {
    const { payment, chargeId } = await newCharge();
    expect(await s.route('payments.public.payment_status', { params: { id: payment.id } })).toMatchObject({ ok: true, data: { status: 'pending' } });
    satspay.pay(chargeId);
    // The next poll that asks the charge server (a second on: see the next test).
    await sleep(PUBLIC_CHECK_INTERVAL_MS);
    const polled = await s.route('payments.public.payment_status', { params: { id: payment.id } });
    expect(polled).toMatchObject({ ok: true, data: { payment_id: payment.id, status: 'paid' } });
    expect(await receivedEvents(s, payment.id)).toHaveLength(1);
  });

  it('a hundred forged callbacks and polls at once ask the charge server twice; the real callback after them is applied (found from outside)', async () => {
    const { payment, chargeId } = await newCharge();
    const reads = () => satspay.requests.filter((r) => r.method === 'GET' && r.path === `/satspay/api/v1/charge/${chargeId}`).length;
    const unpaid = JSON.stringify(satspay.chargeJson(chargeId));
    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, i) => (i % 2 ? webhook(unpaid) : s.route('payments.public.payment_status', { params: { id: payment.id } }))),
    );
    for (const a of answers) expect(a).toMatchObject({ ok: true });
    // One check, and one more after a second for the callbacks that came during the first (a third if
    // the hundred took longer than a second to arrive, on a busy machine).
    const burst = reads();
    expect(burst).toBeGreaterThanOrEqual(2);
    expect(burst).toBeLessThanOrEqual(3);
    // The charge is paid and its callback comes a moment after a forged one: it waits for a check of its own.
    expect(await webhook(unpaid)).toEqual({ ok: true, data: { received: true } });
    satspay.pay(chargeId);
    expect(await webhook(JSON.stringify(satspay.chargeJson(chargeId)))).toEqual({ ok: true, data: { received: true } });
    expect((await paymentRow(s, payment.id)).status).toBe('paid');
    expect(reads()).toBe(burst + 2);
  });

  it('dev pay is 409 for a charge-server payment', async () => {
    const { payment } = await newCharge();
    expect(await s.route('payments.dev.pay', { params: { id: payment.id } })).toMatchObject({ ok: false, error: { kind: 'conflict' } });
  });

  it('the sweeper finds a paid charge whose callback never came, once, also with two sweepers at once', async () => {
    const { payment, chargeId } = await newCharge();
    const deps = {
      db: s.db,
      clock: systemClock,
      log: pino({ level: 'silent' }),
      devMode: false,
      invoiceMaxExpiryS: 86_400,
      payments: new PaymentsRepo('payments'),
      rails: {
        lightning: lightningRail(
          new ChargeprocProvider({ url: satspay.url, apiKey: satspay.apiKey, lnbitsWallet: satspay.wallet, timeoutMs: 15_000 }, systemClock),
        ),
      },
      rates: new RateSource({ currency: 'usd', ttlMs: 0, timeoutMs: 1000 }),
    };
    const sweepers = [new Sweeper(deps, { intervalMs: 1000, recheckAfterS: 0 }), new Sweeper(deps, { intervalMs: 1000, recheckAfterS: 0 })];
    await sweepers[0]!.tick(); // (may confirm charges earlier tests paid without a valid callback)
    expect((await paymentRow(s, payment.id)).status).toBe('pending');
    satspay.pay(chargeId);
    const results = await Promise.all(sweepers.map((w) => w.tick()));
    expect(results.reduce((n, r) => n + r.confirmed, 0)).toBe(1);
    expect((await paymentRow(s, payment.id)).status).toBe('paid');
    expect(await outboxCount(s, payment.id)).toBe(1);
    expect(await receivedEvents(s, payment.id)).toHaveLength(1);

    // Expired here, paid there, callback lost: the sweeper still asks for a while after expiry.
    const late = await callMessage(s.bus, messages.createPayment, createRequest({ amount_sats: 5000, expires_at: now() + 1 }));
    const lateCharge = late.checkout.chargeproc_charge_id!;
    await new Promise((r) => setTimeout(r, 2100));
    await sweepers[0]!.tick();
    expect((await paymentRow(s, late.payment.id)).status).toBe('expired');
    satspay.pay(lateCharge);
    expect(await sweepers[1]!.tick()).toEqual({ confirmed: 1, expired: 0 });
    expect((await paymentRow(s, late.payment.id)).status).toBe('paid');
    expect(await receivedEvents(s, late.payment.id)).toHaveLength(1);
  });
});

describe('payments service, Stripe: billing slow or away, amounts Stripe disagrees with', () => {
  let s: PaymentsService;
  let stripe: StripeServer;
  /** Billing's side of renewal_ended: each request waits for `hold` (when set), then `answer` decides. */
  const billing = { asked: [] as string[], hold: undefined as Promise<void> | undefined, fail: false };
  const billingServer = () => createBusServer(s.natsUrl, 'billing');
  let fakeBilling: ReturnType<typeof billingServer>;
  const quiet = pino({ level: 'silent' });

  beforeAll(async () => {
    stripe = await startStripeServer();
    s = await startPaymentsService({
      DEV_MODE: '1',
      ...stripeEnv(stripe),
      FIAT_RATE_FIXED: '50000',
      FIAT_CURRENCY: 'eur',
      PUBLIC_BASE_URL: 'https://subs.example',
      // Longer than the test's own bus wait (30 s): a callback that waited for billing would never be answered in time.
      BUS_TIMEOUT_MS: '60000',
      PAYMENTS_SWEEP_INTERVAL_MS: '3600000',
    });
    fakeBilling = billingServer();
    fakeBilling.add(
      messageHandler(messages.renewalEnded, async ({ payment_id }) => {
        billing.asked.push(payment_id);
        await billing.hold;
        if (billing.fail) throw unavailable('billing is away');
        return { replaced: true };
      }),
      quiet,
    );
    await fakeBilling.listen();
  });
  afterAll(async () => {
    await fakeBilling?.close();
    await s?.stop();
    await stripe?.close();
  });

  const cardPayment = async (purpose: 'checkout' | 'renewal') => {
    const created = await callMessage(s.bus, messages.createPayment, createRequest({ payment_method: 'cardproc', purpose }));
    const row = await paymentRow(s, created.payment.id);
    return { id: created.payment.id as string, session: row.provider_ref as string };
  };
  const deliver = (payload: string) =>
    s.route('payments.webhooks.cardproc', {
      body: { raw: Buffer.from(payload).toString('base64'), headers: { 'stripe-signature': stripe.sign(payload) }, method: 'POST' },
    });

  it("a renewal's expired session is acknowledged without waiting for billing's answer; billing hears of it all the same", async () => {
    const { id, session } = await cardPayment('renewal');
    let release!: () => void;
    billing.hold = new Promise((r) => (release = r));
    try {
      stripe.expire(session);
      expect(await deliver(stripe.eventJson('checkout.session.expired', session))).toEqual({ ok: true, data: { received: true } });
      expect((await paymentRow(s, id)).status).toBe('expired');
      // Answered while billing still holds the notice: the notice is still owed.
      await waitUntil(async () => billing.asked.includes(id), 10_000, 'billing asked');
      expect((await paymentRow(s, id)).end_notice_at).not.toBeNull();
    } finally {
      release();
      billing.hold = undefined;
    }
    await waitUntil(async () => (await paymentRow(s, id)).end_notice_at === null, 10_000, 'notice cleared once billing answered');
  });

  it('the sweeper stops telling billing at the first failure; the rest are told on a later pass', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await cardPayment('renewal')).id);
    await s.db.query('UPDATE payments.payments SET end_notice_at = 1 WHERE id = ANY($1)', [ids]);
    const deps = {
      db: s.db,
      clock: systemClock,
      log: quiet,
      bus: s.bus,
      devMode: false,
      invoiceMaxExpiryS: 86_400,
      payments: new PaymentsRepo('payments'),
      rails: {},
      rates: new RateSource({ currency: 'eur', ttlMs: 0, timeoutMs: 1000 }),
    };
    const sweeper = new Sweeper(deps, { intervalMs: 1000, endNoticeRetryS: 0 });
    const from = billing.asked.length;
    billing.fail = true;
    try {
      await sweeper.tick();
    } finally {
      billing.fail = false;
    }
    expect(billing.asked.slice(from)).toHaveLength(1);
    await sweeper.tick();
    const { rows } = await s.db.query('SELECT count(*)::int AS n FROM payments.payments WHERE id = ANY($1) AND end_notice_at IS NOT NULL', [ids]);
    expect(rows[0].n).toBe(0);
  });

  it('a session paid for another amount is logged once for its payment, however often the payer polls', async () => {
    const { id, session } = await cardPayment('checkout');
    Object.assign(stripe.sessions.get(session)!, { amount_total: 1 });
    stripe.pay(session);
    for (let i = 0; i < 3; i++) {
      expect(await s.route('payments.public.payment_status', { params: { id } })).toMatchObject({ ok: true, data: { status: 'pending' } });
    }
    const warned = () => s.lines.filter((l) => l.includes(id) && l.includes('provider says paid for another amount'));
    await waitUntil(async () => warned().length > 0, 5_000, 'mismatch logged');
    expect(warned()).toHaveLength(1);
  });
});

describe('payments service, on-chain over Esplora: two owners registered one key', () => {
  const ZPUB = 'zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1ADqtfSdVCToUG868RvUUkgDKf31mGDtKsAYz2oz2AGutZYs';
  let s: PaymentsService;
  let esplora: EsploraServer;
  const watchonly: Record<string, string> = {};

  beforeAll(async () => {
    esplora = await startEsploraServer('mainnet');
    s = await startPaymentsService({ ONCHAIN_PROVIDER: 'esplora', ESPLORA_URL: esplora.url, PAYMENTS_SWEEP_INTERVAL_MS: '60000' });
    for (const wallet_id of [WALLET, OTHER_WALLET]) {
      const reply = await s.bus.request('payments.watchonly_wallets.create', {
        caller: { wallet_id, role: 'admin' },
        params: {},
        query: {},
        body: { name: 'Cold', xpub: ZPUB },
      });
      expect(reply).toMatchObject({ ok: true });
      watchonly[wallet_id] = (reply as { data: { id: string } }).data.id;
    }
  });
  afterAll(async () => {
    await s?.stop();
    await esplora?.close();
  });

  const onchain = (wallet_id: string) =>
    createRequest({ wallet_id, payment_method: 'onchain', plan_settings: { watchonly_wallet_id: watchonly[wallet_id]! }, expires_at: now() + 86_400 });
  const addressesOf = async (wallet_id: string) =>
    (await s.db.query('SELECT onchain_address FROM payments.payments WHERE wallet_id = $1 ORDER BY derivation_index', [wallet_id])).rows.map(
      (r) => r.onchain_address,
    );

  it("one owner's payments pass over the addresses the other's hold; a batch where both reach one address at once stores the rest", async () => {
    const a = await callMessage(s.bus, messages.createPayment, onchain(WALLET));
    const b = await callMessage(s.bus, messages.createPayment, onchain(OTHER_WALLET));
    expect(a.payment.onchain_address).not.toBe(b.payment.onchain_address);
    expect(s.lines.some((l) => l.includes('receive address held by another payment'))).toBe(true);

    // Both counters now point at the same next index: in one batch both are opened before either is stored.
    const [x, y, z] = [onchain(WALLET), onchain(OTHER_WALLET), onchain(OTHER_WALLET)];
    const { results } = await callMessage(s.bus, messages.createPayments, { payments: [x, y, z] });
    const errors = results.filter((r) => 'error' in r);
    expect(errors).toEqual([{ error: expect.objectContaining({ kind: 'unavailable' }) }]);
    expect(results.filter((r) => !('error' in r))).toHaveLength(2);
    const all = [...(await addressesOf(WALLET)), ...(await addressesOf(OTHER_WALLET))];
    expect(new Set(all).size).toBe(all.length);
    expect(all).toHaveLength(4);
    // The one that clashed, asked again, gets a fresh address.
    const clashed = [x, y, z][results.findIndex((r) => 'error' in r)]!;
    const retried = await callMessage(s.bus, messages.createPayment, clashed);
    expect(all).not.toContain(retried.payment.onchain_address);
  });

  it('a status poll answers the stored status before the gateway gives up on a slow Esplora, and the check it began still applies', async () => {
    const { payment } = await callMessage(s.bus, messages.createPayment, onchain(WALLET));
    esplora.pay(payment.onchain_address!, payment.amount_sats);
    esplora.mine(1);
    // Each call within the provider timeout (4 s), the two a status check makes past the gateway's 5 s.
    esplora.faults.delayMs = 3_000;
    const gateway = new BusClient(s.natsUrl, 5_000, 'gateway-like');
    await gateway.connect();
    try {
      const reply = await gateway.request('payments.public.payment_status', { caller: {}, params: { id: payment.id }, query: {} });
      expect(reply).toMatchObject({ ok: true, data: { payment_id: payment.id, status: 'pending' } });
    } finally {
      await gateway.close();
    }
    await waitUntil(async () => (await paymentRow(s, payment.id)).status === 'paid', 15_000, 'the slow check applied').finally(() => {
      esplora.faults.delayMs = 0;
    });
  });
});
