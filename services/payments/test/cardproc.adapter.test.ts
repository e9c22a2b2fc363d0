import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StripeCardRail, stripeUnitAmount } from '../src/providers/cardproc.js';
import { ProviderUnavailableError } from '../src/providers/http.js';
import type { RailRequest } from '../src/providers/rail.js';
import type { PaymentRecord } from '../src/domain/payments.js';
import { startStripeServer, type StripeServer } from './support/stripe-server.js';

const NOW = 1_800_000_000;
const clock = { nowMs: () => NOW * 1000 };
let server: StripeServer;
let rail: StripeCardRail;

const railWith = (o: Partial<{ secretKey: string; timeoutMs: number; apiUrl: string }> = {}) =>
  new StripeCardRail(
    { secretKey: server.secretKey, webhookSecret: server.webhookSecret, apiUrl: server.url, publicBaseUrl: 'https://pay.example', timeoutMs: 10_000, ...o },
    clock,
    clock,
  );

const request = (o: Partial<RailRequest> = {}): RailRequest => ({
  payment_id: 'pay_01TEST',
  wallet_id: 'w1',
  subscription_id: 'sub_01TEST',
  plan_id: 'pln_01TEST',
  amount_sats: 2100,
  memo: 'Gold (monthly)',
  expiry_seconds: 86_400,
  purpose: 'checkout',
  plan: {},
  fiat: { amount: 1.05, currency: 'eur', rate: 50_000 },
  ...o,
});
// With the fiat amount `request()` charges: a paid session counts only for it.
const recordOf = (provider_ref: string) => ({ provider_ref, amount_fiat: 1.05, currency: 'eur' }) as PaymentRecord;

beforeAll(async () => {
  server = await startStripeServer({ accounts: ['acct_1Connected'], nowS: () => NOW });
  rail = railWith();
});
afterAll(() => server?.close());

describe('card processor (Stripe Checkout) adapter', () => {
  it('opens a Checkout Session with the documented form fields; the session id is the reference and its url the checkout', async () => {
    const opened = await rail.open(request());
    const req = server.requests.at(-1)!;
    expect([req.method, req.path, req.headers.authorization, req.headers['stripe-account']]).toEqual([
      'POST',
      '/v1/checkout/sessions',
      `Bearer ${server.secretKey}`,
      undefined,
    ]);
    expect(req.headers['content-type']).toMatch(/^application\/x-www-form-urlencoded/);
    expect(req.form).toEqual({
      mode: 'payment',
      line_items: [{ quantity: '1', price_data: { currency: 'eur', unit_amount: '105', product_data: { name: 'Gold (monthly)' } } }],
      metadata: { payment_id: 'pay_01TEST', subscription_id: 'sub_01TEST' },
      client_reference_id: 'pay_01TEST',
      success_url: 'https://pay.example/subscriptions_manager/checkout/pln_01TEST?payment=pay_01TEST',
      cancel_url: 'https://pay.example/subscriptions_manager/checkout/pln_01TEST?payment=pay_01TEST',
      expires_at: String(NOW + 86_400 - 60),
    });
    const session = server.sessions.get(opened.provider_ref!)!;
    expect(session).toMatchObject({ amount_total: 105, currency: 'eur', account: null, status: 'open' });
    expect(opened).toEqual({ provider_ref: session.id, checkout_url: session.url, expires_at: NOW + 86_400 - 60 });
    expect(opened.provider_ref).toMatch(/^cs_test_/);
  });

  it('keeps expires_at within Stripe bounds (30 min .. 24 h from creation)', async () => {
    const short = await rail.open(request({ expiry_seconds: 60 }));
    expect(short.expires_at).toBe(NOW + 1800 + 60);
    expect(server.requests.at(-1)!.form.expires_at).toBe(String(NOW + 1860));
    const mid = await rail.open(request({ expiry_seconds: 7200 }));
    expect(mid.expires_at).toBe(NOW + 7200);
    const long = await rail.open(request({ expiry_seconds: 7 * 86_400 }));
    expect(long.expires_at).toBe(NOW + 86_400 - 60);
  });

  it('records the expiry Stripe was sent, even when a second passes while Stripe answers; a test clock ahead shifts it by whole seconds', async () => {
    // One clock for both, as in production: it crosses a second boundary during the call.
    let ms = NOW * 1000 + 999;
    const moving = { nowMs: () => ms };
    const mover = new StripeCardRail(
      { secretKey: server.secretKey, webhookSecret: server.webhookSecret, apiUrl: server.url, publicBaseUrl: 'https://pay.example', timeoutMs: 10_000 },
      moving,
      moving,
    );
    const before = server.requests.length;
    const opening = mover.open(request({ expiry_seconds: 7200 }));
    ms += 2;
    const opened = await opening;
    expect(server.requests.length).toBe(before + 1);
    expect(opened.expires_at).toBe(Number(server.requests.at(-1)!.form.expires_at));
    // DEV_MODE's clock moved a day ahead: the record follows it; Stripe is sent wall time.
    const ahead = new StripeCardRail(
      { secretKey: server.secretKey, webhookSecret: server.webhookSecret, apiUrl: server.url, publicBaseUrl: 'https://pay.example', timeoutMs: 10_000 },
      { nowMs: () => (NOW + 86_400) * 1000 + 400 },
      clock,
    );
    const later = await ahead.open(request({ expiry_seconds: 7200 }));
    expect(server.requests.at(-1)!.form.expires_at).toBe(String(NOW + 7200));
    expect(later.expires_at).toBe(NOW + 86_400 + 7200);
  });

  it("creates the session on the plan's connected account and reads it back there", async () => {
    const opened = await rail.open(request({ plan: { cardproc_account_id: 'acct_1Connected' } }));
    expect(server.requests.at(-1)!.headers['stripe-account']).toBe('acct_1Connected');
    const sessionId = opened.provider_ref!.split('/')[1]!;
    expect(opened.provider_ref).toBe(`acct_1Connected/${sessionId}`);
    expect(server.sessions.get(sessionId)!.account).toBe('acct_1Connected');
    expect(await rail.status(recordOf(opened.provider_ref!))).toEqual({ paid: false });
    expect(server.requests.at(-1)!).toMatchObject({
      method: 'GET',
      path: `/v1/checkout/sessions/${sessionId}`,
      headers: { 'stripe-account': 'acct_1Connected' },
    });
    // The same session is not visible from the platform account (Stripe answers 404 there).
    await expect(rail.status(recordOf(sessionId))).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/HTTP 404/) });
  });

  it('status: pending until Stripe says paid, then paid with the PaymentIntent; an async (unpaid) completion stays pending', async () => {
    const opened = await rail.open(request());
    const p = recordOf(opened.provider_ref!);
    expect(await rail.status(p)).toEqual({ paid: false });
    server.pay(opened.provider_ref!, { async: true });
    expect(await rail.status(p)).toEqual({ paid: false });
    const s = server.pay(opened.provider_ref!);
    expect(await rail.status(p)).toEqual({ paid: true, cardproc_payment_id: s.payment_intent });
    expect(s.payment_intent).toMatch(/^pi_/);
    // An expired session is never "failed" from a poll; the sweeper expires the payment on its own clock.
    const other = await rail.open(request());
    server.expire(other.provider_ref!);
    expect(await rail.status(recordOf(other.provider_ref!))).toEqual({ paid: false });
  });

  it('status: a session paid for another amount or currency than the payment records is not paid, and says why', async () => {
    // A currency that is not a string (a session shaped by whoever signed it; found from outside: a 500).
    for (const change of [{ amount_total: 104 }, { currency: 'usd' }, { currency: 5 }, { currency: {} }, { currency: null }]) {
      const opened = await rail.open(request());
      Object.assign(server.sessions.get(opened.provider_ref!)!, change);
      server.pay(opened.provider_ref!);
      const status = await rail.status(recordOf(opened.provider_ref!));
      expect(status).toEqual({ paid: false, mismatch: expect.stringMatching(/^stripe: the session charged .*, the payment is 105 eur/) });
    }
  });

  it('status: a session that charged more than the payment records pays it (found from outside: the money taken, the payment left pending)', async () => {
    const opened = await rail.open(request());
    Object.assign(server.sessions.get(opened.provider_ref!)!, { amount_total: 106 });
    server.pay(opened.provider_ref!);
    expect(await rail.status(recordOf(opened.provider_ref!))).toMatchObject({ paid: true });
  });

  it('status: a session made from a 3-decimal quote is paid against the amount as stored (NUMERIC(20,2) keeps cents, half away from zero)', async () => {
    // [quote from satsToFiat, what the amount_fiat column keeps of it]; float `x * 100` rounds down on these.
    for (const [quote, stored] of [
      [4.185, 4.19],
      [1.005, 1.01],
      [2.675, 2.68],
      [0.125, 0.13],
    ] as const) {
      const opened = await rail.open(request({ fiat: { amount: quote, currency: 'kwd', rate: 30_000 } }));
      expect(server.sessions.get(opened.provider_ref!)!.amount_total).toBe(Math.round(stored * 100) * 10);
      const s = server.pay(opened.provider_ref!);
      const p = { provider_ref: opened.provider_ref, amount_fiat: stored, currency: 'kwd' } as PaymentRecord;
      expect(await rail.status(p), `${quote} KWD`).toEqual({ paid: true, cardproc_payment_id: s.payment_intent });
    }
  });

  it('cancel expires the open session at Stripe (on its connected account); a session already paid or expired is left as it is', async () => {
    const opened = await rail.open(request());
    await rail.cancel(recordOf(opened.provider_ref!));
    const expire = server.requests.at(-1)!;
    expect([expire.method, expire.path, expire.headers['stripe-account']]).toEqual(['POST', `/v1/checkout/sessions/${opened.provider_ref}/expire`, undefined]);
    expect(server.sessions.get(opened.provider_ref!)).toMatchObject({ status: 'expired', url: null });
    // Again: Stripe refuses (400, not open), and the session is expired, as wanted.
    await rail.cancel(recordOf(opened.provider_ref!));
    expect(server.sessions.get(opened.provider_ref!)!.status).toBe('expired');

    const paid = await rail.open(request());
    server.pay(paid.provider_ref!);
    await rail.cancel(recordOf(paid.provider_ref!));
    expect(server.sessions.get(paid.provider_ref!)).toMatchObject({ status: 'complete', payment_status: 'paid' });

    const connected = await rail.open(request({ plan: { cardproc_account_id: 'acct_1Connected' } }));
    const sessionId = connected.provider_ref!.split('/')[1]!;
    await rail.cancel(recordOf(connected.provider_ref!));
    expect(server.requests.at(-1)!).toMatchObject({
      method: 'POST',
      path: `/v1/checkout/sessions/${sessionId}/expire`,
      headers: { 'stripe-account': 'acct_1Connected' },
    });
    expect(server.sessions.get(sessionId)!.status).toBe('expired');

    // Stripe failing leaves the session open: that is an error for the caller to log.
    const open = await rail.open(request());
    server.faults.status = 500;
    try {
      await expect(rail.cancel(recordOf(open.provider_ref!))).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/expire: HTTP 500/) });
    } finally {
      delete server.faults.status;
    }
    expect(server.sessions.get(open.provider_ref!)!.status).toBe('open');
  });

  it('charges in Stripe minor units', () => {
    expect(stripeUnitAmount(1.05, 'eur')).toBe(105);
    expect(stripeUnitAmount(0.01, 'usd')).toBe(1);
    expect(stripeUnitAmount(1234.56, 'jpy')).toBe(1235);
    expect(stripeUnitAmount(1.23, 'kwd')).toBe(1230);
  });

  it("a price below Stripe's minimum charge is the payer's 422 on the method: no retry helps (found from outside: 503)", async () => {
    await expect(rail.open(request({ fiat: { amount: 0.2, currency: 'eur', rate: 50_000 } }))).rejects.toMatchObject({
      kind: 'invalid',
      message:
        "This plan cannot be paid by card: its price, 0.20 EUR at today's rate, is below the smallest amount the card processor takes. Choose another payment method",
      issues: [expect.objectContaining({ field: ['payment_method'] })],
    });
    await expect(rail.open(request({ fiat: { amount: 49, currency: 'jpy', rate: 50_000 } }))).rejects.toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('its price, 49 JPY at'),
    });
    // A renewal's refusal reaches the owner, who has no payment method to choose.
    await expect(rail.open(request({ purpose: 'renewal', fiat: { amount: 0.2, currency: 'eur', rate: 50_000 } }))).rejects.toMatchObject({
      kind: 'invalid',
      message: "The renewal's price, 0.20 EUR at today's rate, is below the smallest amount the card processor takes",
    });
  });

  it('a wrong key, an unknown account, a 5xx or no answer in time is ProviderUnavailableError (503) with the reason', async () => {
    const wrongKey = railWith({ secretKey: 'sk_test_wrongwrongwrongwrong1234' });
    const err = await wrongKey.open(request()).catch((e) => e);
    expect(err).toBeInstanceOf(ProviderUnavailableError);
    expect(err.reason).toMatch(/HTTP 401/);
    expect(err.reason).not.toContain('sk_test_wrongwrongwrongwrong1234');
    expect(err.message).not.toMatch(/stripe|401/i);
    await expect(rail.open(request({ plan: { cardproc_account_id: 'acct_unknown' } }))).rejects.toMatchObject({
      kind: 'unavailable',
      reason: expect.stringMatching(/HTTP 403/),
    });
    await expect(rail.status(recordOf('cs_test_doesnotexist'))).rejects.toMatchObject({
      kind: 'unavailable',
      reason: expect.stringMatching(/HTTP 404 .*No such checkout.session/),
    });

    server.faults.status = 500;
    try {
      await expect(rail.open(request())).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/HTTP 500/) });
    } finally {
      delete server.faults.status;
    }
    server.faults.delayMs = 3000;
    try {
      await expect(railWith({ timeoutMs: 300 }).open(request())).rejects.toBeInstanceOf(ProviderUnavailableError);
    } finally {
      delete server.faults.delayMs;
    }
    await expect(railWith({ apiUrl: 'http://127.0.0.1:1' }).open(request())).rejects.toBeInstanceOf(ProviderUnavailableError);
  });

  it('an answer that stops mid-body, or never ends, is Stripe unavailable (a 503), read no further than 1 MiB', async () => {
    const opened = await rail.open(request());
    for (const body of ['stall', 'endless'] as const) {
      server.faults.body = body;
      try {
        const before = process.memoryUsage().rss;
        const started = Date.now();
        const err = await railWith({ timeoutMs: 1_500 })
          .status(recordOf(opened.provider_ref!))
          .catch((e) => e);
        expect(err, body).toBeInstanceOf(ProviderUnavailableError);
        expect(err.reason, body).toMatch(/response body/);
        expect(Date.now() - started, body).toBeLessThan(5_000);
        expect(process.memoryUsage().rss - before, body).toBeLessThan(200 * 1024 * 1024);
      } finally {
        delete server.faults.body;
      }
    }
  });

  it('verifies webhook signatures: the SDK-signed event passes; forged, wrong secret, stale, future, unsigned are 400', async () => {
    const opened = await rail.open(request());
    const payload = server.eventJson('checkout.session.completed', opened.provider_ref!);
    const ok = rail.verifyEvent(Buffer.from(payload), server.sign(payload, { timestamp: NOW }));
    expect(ok).toMatchObject({ type: 'checkout.session.completed', data: { object: { id: opened.provider_ref, metadata: { payment_id: 'pay_01TEST' } } } });
    const bad = [
      [payload.replace('"livemode": false', '"livemode": true'), server.sign(payload, { timestamp: NOW })],
      [payload, server.sign(payload, { timestamp: NOW, secret: 'whsec_other' })],
      [payload, server.sign(payload, { timestamp: NOW - 301 })],
      [payload, server.sign(payload, { timestamp: NOW + 301 })],
      [payload, undefined],
      [payload, 't=1,v1=00'],
    ] as const;
    for (const [body, sig] of bad) expect(() => rail.verifyEvent(Buffer.from(body), sig)).toThrow(expect.objectContaining({ kind: 'rejected' }));

    // Two timestamps: Stripe's check takes the last, so a future one signed there must not hide behind a current first one.
    const future = server.sign(payload, { timestamp: NOW + 400 });
    expect(() => rail.verifyEvent(Buffer.from(payload), `t=${NOW},${future}`)).toThrow(
      expect.objectContaining({ kind: 'rejected', message: 'Invalid callback' }),
    );
    expect(() => rail.verifyEvent(Buffer.from(payload), `${server.sign(payload, { timestamp: NOW })},t=${NOW}`)).toThrow(
      expect.objectContaining({ kind: 'rejected' }),
    );

    // Several endpoint secrets (platform and Connect): an event signed with any of them passes, others do not.
    const both = new StripeCardRail(
      {
        secretKey: server.secretKey,
        webhookSecret: `whsec_connect, ${server.webhookSecret}`,
        apiUrl: server.url,
        publicBaseUrl: 'https://pay.example',
        timeoutMs: 10_000,
      },
      clock,
      clock,
    );
    for (const secret of ['whsec_connect', server.webhookSecret]) {
      expect(both.verifyEvent(Buffer.from(payload), server.sign(payload, { timestamp: NOW, secret })).id).toBe(ok.id);
    }
    expect(() => both.verifyEvent(Buffer.from(payload), server.sign(payload, { timestamp: NOW, secret: 'whsec_other' }))).toThrow(
      expect.objectContaining({ kind: 'rejected' }),
    );
  });
});
