import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProviderUnavailableError } from '../src/providers/http.js';
import type { RailRequest } from '../src/providers/rail.js';
import { PaypalClient, paypalRail, transmissionOf, type PaypalSettings } from '../src/providers/walletproc.js';
import { startPaypalServer, type PaypalServer } from './support/paypal-server.js';

const clock = { nowMs: () => 1_800_000_000_000 };
let server: PaypalServer;

beforeAll(async () => {
  server = await startPaypalServer();
});
afterAll(() => server?.close());

function settings(over: Partial<PaypalSettings> = {}): PaypalSettings {
  return {
    apiUrl: server.url,
    clientId: server.clientId,
    clientSecret: server.clientSecret,
    webhookId: server.webhookId,
    timeoutMs: 10_000,
    returnUrl: (r) => `https://pay.example/back/${r.plan_id}/${r.payment_id}`,
    ...over,
  };
}

let n = 0;
function request(over: Partial<RailRequest> = {}): RailRequest {
  n++;
  return {
    payment_id: `pay_test${n}`,
    wallet_id: 'w1',
    subscription_id: `sub_${n}`,
    plan_id: 'pln_gold',
    amount_sats: 2100,
    memo: 'Gold (monthly)',
    expiry_seconds: 86_400,
    purpose: 'checkout',
    plan: {},
    fiat: { amount: 1.3, currency: 'usd', rate: 61_904.76 },
    ...over,
  };
}

/** The fiat amount `request()` records on its payment: what a capture must be for. */
const FIAT = { amount_fiat: 1.3, currency: 'usd' };
const since = (from: number) => server.requests.slice(from);

describe('PayPal wallet-processor adapter', () => {
  it('creates a CAPTURE order with the payment id as custom_id and PayPal-Request-Id; the payer-action link is the checkout', async () => {
    const rail = paypalRail(new PaypalClient(settings()), clock);
    const from = server.requests.length;
    const req = request();
    const opened = await rail.open(req);

    const [token, create] = since(from);
    expect([token!.method, token!.path, token!.headers.authorization, token!.headers['content-type'], token!.body]).toEqual([
      'POST',
      '/v1/oauth2/token',
      `Basic ${Buffer.from(`${server.clientId}:${server.clientSecret}`).toString('base64')}`,
      'application/x-www-form-urlencoded',
      'grant_type=client_credentials',
    ]);
    expect([create!.method, create!.path, create!.headers['paypal-request-id']]).toEqual(['POST', '/v2/checkout/orders', req.payment_id]);
    expect(create!.headers.authorization).toMatch(/^Bearer A21AA/);
    expect(create!.body).toEqual({
      intent: 'CAPTURE',
      purchase_units: [
        {
          reference_id: req.subscription_id,
          custom_id: req.payment_id,
          invoice_id: req.payment_id,
          description: 'Gold (monthly)',
          amount: { currency_code: 'USD', value: '1.30' },
        },
      ],
      payment_source: {
        paypal: {
          experience_context: {
            return_url: `https://pay.example/back/pln_gold/${req.payment_id}`,
            cancel_url: `https://pay.example/back/pln_gold/${req.payment_id}`,
            user_action: 'PAY_NOW',
            shipping_preference: 'NO_SHIPPING',
          },
        },
      },
    });
    const order = server.orders.get(opened.provider_ref!)!;
    expect(order.status).toBe('PAYER_ACTION_REQUIRED');
    expect(opened).toEqual({
      provider_ref: order.id,
      walletproc_order_id: order.id,
      checkout_url: `${server.url}/checkoutnow?token=${order.id}`,
      expires_at: 1_800_000_000 + 86_400,
    });
  });

  it('names the plan owner as payee when the plan has a merchant id; a retried create answers the same order', async () => {
    const rail = paypalRail(new PaypalClient(settings()), clock);
    const req = request({ plan: { walletproc_merchant_id: 'C7CYMKZDG8D6E' }, fiat: { amount: 12, currency: 'eur', rate: 1 } });
    const orders = server.orders.size;
    const first = await rail.open(req);
    const unit = (server.requests.at(-1)!.body as any).purchase_units[0];
    expect(unit.payee).toEqual({ merchant_id: 'C7CYMKZDG8D6E' });
    expect(unit.amount).toEqual({ currency_code: 'EUR', value: '12.00' });
    const again = await rail.open(req);
    expect(again.provider_ref).toBe(first.provider_ref);
    expect(server.orders.size).toBe(orders + 1);
  });

  it('caches the token until shortly before it expires, shares one token request, and renews once on a 401', async () => {
    let now = 1_000_000;
    const paypal = new PaypalClient(settings(), () => now);
    const { order } = await paypal.createOrder(request());
    const issued = server.tokensIssued;
    await Promise.all(Array.from({ length: 5 }, () => paypal.getOrder(order.id)));
    expect(server.tokensIssued).toBe(issued); // the create's token

    now += (server.tokenLifetimeS - 120) * 1000;
    await paypal.getOrder(order.id);
    expect(server.tokensIssued).toBe(issued);
    now += 90_000; // within a minute of expiry: renewed before PayPal would refuse it
    await Promise.all(Array.from({ length: 3 }, () => paypal.getOrder(order.id)));
    expect(server.tokensIssued).toBe(issued + 1);

    server.revokeTokens();
    const from = server.requests.length;
    await Promise.all([paypal.getOrder(order.id), paypal.getOrder(order.id)]);
    expect(server.tokensIssued).toBe(issued + 2);
    expect(
      since(from)
        .map((r) => `${r.path.startsWith('/v1/oauth2') ? 'token' : 'get'}`)
        .sort(),
    ).toEqual(['get', 'get', 'get', 'get', 'token']);
  });

  it('wrong credentials, an unknown order, a 5xx or no answer in time is ProviderUnavailableError; the secret is never in the reason', async () => {
    const wrong = new PaypalClient(settings({ clientSecret: 'not-the-secret' }));
    const err = await wrong.getOrder('ABC').catch((e) => e);
    expect(err).toBeInstanceOf(ProviderUnavailableError);
    expect(err).toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/oauth2\/token: HTTP 401 invalid_client/) });
    expect(err.reason).not.toContain('not-the-secret');

    const paypal = new PaypalClient(settings());
    await expect(paypal.getOrder('NOSUCHORDER12345')).rejects.toMatchObject({
      kind: 'unavailable',
      reason: expect.stringMatching(/HTTP 404 RESOURCE_NOT_FOUND INVALID_RESOURCE_ID debug_id/),
    });
    await expect(paypal.createOrder(request({ plan: { walletproc_merchant_id: 'not a merchant' } }))).rejects.toMatchObject({
      reason: expect.stringMatching(/HTTP 400 INVALID_REQUEST INVALID_PARAMETER_VALUE/),
    });

    server.faults.status = 503;
    try {
      await expect(paypal.createOrder(request())).rejects.toBeInstanceOf(ProviderUnavailableError);
    } finally {
      delete server.faults.status;
    }
    server.faults.delayMs = 2000;
    try {
      const impatient = new PaypalClient(settings({ timeoutMs: 300 }));
      await expect(impatient.getOrder('ABC')).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/no answer within 300 ms/) });
    } finally {
      delete server.faults.delayMs;
    }
    const nobody = new PaypalClient(settings({ apiUrl: 'http://127.0.0.1:1' }));
    await expect(nobody.getOrder('ABC')).rejects.toBeInstanceOf(ProviderUnavailableError);
  });

  it('status: unapproved is pending; approved is captured (once, idempotently) and paid; declined and voided fail', async () => {
    const paypal = new PaypalClient(settings());
    const rail = paypalRail(paypal, clock);
    const opened = await rail.open(request());
    const payment = { provider_ref: opened.provider_ref, status: 'pending', ...FIAT } as any;
    expect(await rail.status!(payment)).toEqual({ paid: false });

    server.approve(opened.provider_ref!);
    const from = server.requests.length;
    expect(await rail.status!(payment)).toEqual({ paid: true });
    const capture = since(from).find((r) => r.path.endsWith('/capture'))!;
    expect(capture.headers['paypal-request-id']).toBe(`capture-${opened.provider_ref}`);
    const captureId = server.orders.get(opened.provider_ref!)!.purchase_units[0]!.payments.captures[0].id;
    // A second capture (a redelivered approval) is answered from PayPal's idempotency record: same capture.
    const again = await paypal.capture(opened.provider_ref!);
    expect(again.purchase_units![0]!.payments!.captures!.map((c) => c.id)).toEqual([captureId]);
    expect(await rail.status!(payment)).toEqual({ paid: true });

    // Captured by someone else with another request id: ORDER_ALREADY_CAPTURED, so the order is read.
    const other = await rail.open(request());
    server.approve(other.provider_ref!);
    const token = await (
      await fetch(`${server.url}/v1/oauth2/token`, {
        method: 'POST',
        body: 'grant_type=client_credentials',
        headers: {
          authorization: `Basic ${Buffer.from(`${server.clientId}:${server.clientSecret}`).toString('base64')}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
      })
    ).json();
    const elsewhere = await fetch(`${server.url}/v2/checkout/orders/${other.provider_ref}/capture`, {
      method: 'POST',
      body: '{}',
      headers: { authorization: `Bearer ${token.access_token}`, 'content-type': 'application/json', 'paypal-request-id': 'someone-else' },
    });
    expect(elsewhere.status).toBe(201);
    const read = await paypal.capture(other.provider_ref!);
    expect(read.status).toBe('COMPLETED');
    expect(
      since(from).some((r) => r.path.endsWith(`${other.provider_ref}/capture`) && r.headers['paypal-request-id'] === `capture-${other.provider_ref}`),
    ).toBe(true);

    const pending = await rail.open(request());
    server.approve(pending.provider_ref!, 'PENDING');
    expect(await rail.status!({ provider_ref: pending.provider_ref, status: 'pending', ...FIAT } as any)).toEqual({ paid: false });
    server.settleCapture(pending.provider_ref!, 'DECLINED');
    expect(await rail.status!({ provider_ref: pending.provider_ref, status: 'pending', ...FIAT } as any)).toEqual({ paid: false, failed: true });

    const declined = await rail.open(request());
    server.approve(declined.provider_ref!, 'DECLINED');
    expect(await rail.status!({ provider_ref: declined.provider_ref, status: 'pending', ...FIAT } as any)).toEqual({ paid: false, failed: true });

    const voided = await rail.open(request());
    server.orders.get(voided.provider_ref!)!.status = 'VOIDED';
    expect(await rail.status!({ provider_ref: voided.provider_ref, status: 'pending', ...FIAT } as any)).toEqual({ paid: false, failed: true });
  });

  it('capture asks PayPal for the whole order (its default answer has no amount), and reads the order when the answer still lacks it', async () => {
    const rail = paypalRail(new PaypalClient(settings()), clock);
    for (const minimalCapture of [false, true]) {
      const opened = await rail.open(request());
      server.approve(opened.provider_ref!);
      server.faults.minimalCapture = minimalCapture;
      const from = server.requests.length;
      try {
        expect(await rail.status!({ provider_ref: opened.provider_ref, status: 'pending', ...FIAT } as any), `minimal: ${minimalCapture}`).toEqual({
          paid: true,
        });
      } finally {
        server.faults.minimalCapture = false;
      }
      const calls = since(from);
      expect(calls.find((r) => r.path.endsWith('/capture'))!.headers.prefer).toBe('return=representation');
      // The order is read before the capture, and once more after a minimal answer.
      expect(calls.filter((r) => r.method === 'GET').length).toBe(minimalCapture ? 2 : 1);
    }
  });

  it('status: an order captured for another amount or currency than the payment records is not paid, and says why', async () => {
    const rail = paypalRail(new PaypalClient(settings()), clock);
    for (const amount of [
      { currency_code: 'USD', value: '1.29' },
      { currency_code: 'EUR', value: '1.30' },
    ]) {
      const opened = await rail.open(request());
      server.orders.get(opened.provider_ref!)!.purchase_units[0]!.amount = amount;
      server.approve(opened.provider_ref!);
      const status = await rail.status!({ provider_ref: opened.provider_ref, status: 'pending', ...FIAT } as any);
      expect(status).toEqual({ paid: false, mismatch: `paypal: captured ${amount.value} ${amount.currency_code}, the payment is 1.30 USD` });
      expect(server.orders.get(opened.provider_ref!)!.status).toBe('COMPLETED');
    }
    // More than the payment records, in its currency: paid (found from outside: the money taken, left pending).
    const over = await rail.open(request());
    server.orders.get(over.provider_ref!)!.purchase_units[0]!.amount = { currency_code: 'USD', value: '1.31' };
    server.approve(over.provider_ref!);
    expect(await rail.status!({ provider_ref: over.provider_ref, status: 'pending', ...FIAT } as any)).toEqual({ paid: true });
  });

  it('status never captures the approved order of a payment that is no longer pending (we expired it)', async () => {
    const rail = paypalRail(new PaypalClient(settings()), clock);
    const opened = await rail.open(request());
    server.approve(opened.provider_ref!);
    const from = server.requests.length;
    for (const status of ['expired', 'failed']) {
      expect(await rail.status!({ provider_ref: opened.provider_ref, status } as any)).toEqual({ paid: false });
    }
    expect(since(from).filter((r) => r.path.endsWith('/capture'))).toEqual([]);
    expect(server.orders.get(opened.provider_ref!)!.status).toBe('APPROVED');
  });

  it('sends amounts with the decimals PayPal takes for the currency: none for JPY, HUF, TWD', async () => {
    const rail = paypalRail(new PaypalClient(settings()), clock);
    const cases: [number, string, string][] = [
      [125.99, 'jpy', '126'],
      [350.4, 'huf', '350'],
      [39.5, 'twd', '40'],
      [0.01, 'jpy', '1'],
      [1.26, 'usd', '1.26'],
      [12, 'eur', '12.00'],
    ];
    for (const [amount, currency, value] of cases) {
      const opened = await rail.open(request({ fiat: { amount, currency, rate: 1 } }));
      expect(server.orders.get(opened.provider_ref!)!.purchase_units[0]!.amount, `${amount} ${currency}`).toEqual({
        currency_code: currency.toUpperCase(),
        value,
      });
    }
    // The local PayPal refuses decimals there as PayPal does.
    const token = await (
      await fetch(`${server.url}/v1/oauth2/token`, {
        method: 'POST',
        body: 'grant_type=client_credentials',
        headers: {
          authorization: `Basic ${Buffer.from(`${server.clientId}:${server.clientSecret}`).toString('base64')}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
      })
    ).json();
    const refused = await fetch(`${server.url}/v2/checkout/orders`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token.access_token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ intent: 'CAPTURE', purchase_units: [{ amount: { currency_code: 'JPY', value: '125.99' } }] }),
    });
    expect([refused.status, (await refused.json()).details[0].issue]).toEqual([422, 'DECIMALS_NOT_SUPPORTED']);
  });

  it('a capture before approval is refused by PayPal and surfaces as ProviderUnavailableError', async () => {
    const paypal = new PaypalClient(settings());
    const { order } = await paypal.createOrder(request());
    await expect(paypal.capture(order.id)).rejects.toMatchObject({
      kind: 'unavailable',
      reason: expect.stringMatching(/HTTP 422 UNPROCESSABLE_ENTITY ORDER_NOT_APPROVED/),
    });
  });

  it('webhook verification: SUCCESS only for the exact event PayPal signed for this webhook', async () => {
    const paypal = new PaypalClient(settings());
    const { order } = await paypal.createOrder(request());
    server.approve(order.id);
    const event = server.event('CHECKOUT.ORDER.APPROVED', order.id);
    const genuine = server.sign(event);
    const t = transmissionOf(genuine.headers)!;
    const from = server.requests.length;
    expect(await paypal.verifyWebhook(t, genuine.body)).toBe(true);
    const call = since(from).find((r) => r.path === '/v1/notifications/verify-webhook-signature')!;
    expect(call.body).toEqual({
      auth_algo: 'SHA256withRSA',
      cert_url: genuine.headers['paypal-cert-url'],
      transmission_id: genuine.headers['paypal-transmission-id'],
      transmission_sig: genuine.headers['paypal-transmission-sig'],
      transmission_time: genuine.headers['paypal-transmission-time'],
      webhook_id: server.webhookId,
      webhook_event: event,
    });

    expect(await paypal.verifyWebhook(t, genuine.body.replace('CHECKOUT.ORDER.APPROVED', 'PAYMENT.CAPTURE.DENIED'))).toBe(false);
    expect(await paypal.verifyWebhook({ ...t, transmission_sig: Buffer.from('forged').toString('base64') }, genuine.body)).toBe(false);
    expect(await paypal.verifyWebhook(transmissionOf(server.sign(event, 'OTHERWEBHOOK1234').headers)!, genuine.body)).toBe(false);
    const elsewhere = new PaypalClient(settings({ webhookId: 'OTHERWEBHOOK1234' }));
    expect(await elsewhere.verifyWebhook(t, genuine.body)).toBe(false);

    expect(transmissionOf({ ...genuine.headers, 'paypal-transmission-sig': '' })).toBeUndefined();
    server.faults.status = 500;
    try {
      await expect(paypal.verifyWebhook(t, genuine.body)).rejects.toBeInstanceOf(ProviderUnavailableError);
    } finally {
      delete server.faults.status;
    }
  });

  it('an answer that stops mid-body, or never ends, is PayPal unavailable (a 503), read no further than 1 MiB (found from outside: "not verified", and 1.2 GB read)', async () => {
    const paypal = new PaypalClient(settings({ timeoutMs: 1_500 }));
    const { order } = await paypal.createOrder(request());
    const genuine = server.sign(server.event('CHECKOUT.ORDER.APPROVED', order.id));
    const t = transmissionOf(genuine.headers)!;
    for (const body of ['stall', 'endless'] as const) {
      server.faults.body = body;
      try {
        const before = process.memoryUsage().rss;
        const err = await paypal.verifyWebhook(t, genuine.body).catch((e) => e);
        expect(err, body).toBeInstanceOf(ProviderUnavailableError);
        expect(err.reason, body).toMatch(body === 'stall' ? /verify-webhook-signature: .*(abort|time)/i : /larger than 1048576 bytes/);
        expect(process.memoryUsage().rss - before, body).toBeLessThan(200 * 1024 * 1024);
      } finally {
        delete server.faults.body;
      }
    }
  });
});
