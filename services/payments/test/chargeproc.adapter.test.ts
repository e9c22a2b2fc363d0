import { decode } from 'light-bolt11-decoder';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChargeprocProvider, chargeIsPaid } from '../src/providers/chargeproc.js';
import { ProviderUnavailableError } from '../src/providers/http.js';
import { startSatspayServer, type SatspayServer } from './support/satspay-server.js';

const clock = { nowMs: () => 1_800_000_000_000 };
let server: SatspayServer;
let chargeproc: ChargeprocProvider;

beforeAll(async () => {
  server = await startSatspayServer();
  chargeproc = new ChargeprocProvider(
    { url: server.url, apiKey: server.apiKey, lnbitsWallet: server.wallet, timeoutMs: 10_000, completeLink: 'https://shop.example' },
    clock,
  );
});
afterAll(() => server?.close());

describe('charge server (SatsPay) adapter', () => {
  it('creates a Lightning charge with the documented body; the charge id is the reference', async () => {
    const inv = await chargeproc.createInvoice({ amount_sats: 2500, memo: 'Silver (weekly)', expiry_seconds: 3600, webhook_url: 'https://pay.example/cb' });
    const req = server.requests.at(-1)!;
    expect([req.method, req.path, req.headers['x-api-key']]).toEqual(['POST', '/satspay/api/v1/charge', server.apiKey]);
    expect(req.body).toEqual({
      lnbitswallet: server.wallet,
      description: 'Silver (weekly)',
      amount: 2500,
      time: 60,
      webhook: 'https://pay.example/cb',
      completelink: 'https://shop.example',
    });
    const charge = server.charges.get(inv.provider_ref)!;
    expect(inv).toEqual({
      payment_request: charge.payment_request,
      payment_hash: charge.payment_hash,
      provider_ref: charge.id,
      expires_at: 1_800_000_000 + 3600,
    });
    expect(decode(inv.payment_request).sections.find((s) => s.name === 'payment_hash')).toMatchObject({ value: charge.payment_hash });
  });

  it('asks for whole minutes, at least one', async () => {
    await chargeproc.createInvoice({ amount_sats: 1, memo: 'x', expiry_seconds: 10 });
    expect((server.requests.at(-1)!.body as { time: number }).time).toBe(1);
    const inv = await chargeproc.createInvoice({ amount_sats: 1, memo: 'x', expiry_seconds: 61 });
    expect((server.requests.at(-1)!.body as { time: number }).time).toBe(2);
    expect(inv.expires_at).toBe(1_800_000_000 + 120);
  });

  it('a charge is paid only when its balance covers its amount', async () => {
    const inv = await chargeproc.createInvoice({ amount_sats: 1000, memo: 'x', expiry_seconds: 600 });
    expect(await chargeproc.getStatus(inv.provider_ref, 1000)).toEqual({ paid: false });
    const req = server.requests.at(-1)!;
    expect([req.method, req.path, req.headers['x-api-key']]).toEqual(['GET', `/satspay/api/v1/charge/${inv.provider_ref}`, server.apiKey]);
    server.pay(inv.provider_ref, 400); // underpaid
    expect(await chargeproc.getStatus(inv.provider_ref, 1000)).toEqual({ paid: false });
    server.pay(inv.provider_ref);
    expect(await chargeproc.getStatus(inv.provider_ref, 1000)).toEqual({ paid: true });
    // The balance against the payment's own amount: not the charge's `paid` flag (found from outside).
    expect(chargeIsPaid({ balance: 0 }, 10)).toBe(false);
    expect(chargeIsPaid({ balance: 11 }, 10)).toBe(true);
    expect(chargeIsPaid({ balance: 9 }, 10)).toBe(false);
  });

  it('a wrong key, an unknown charge, a 5xx or no answer in time is ProviderUnavailableError (503)', async () => {
    const wrongKey = new ChargeprocProvider({ url: server.url, apiKey: 'nope', lnbitsWallet: server.wallet, timeoutMs: 10_000 }, clock);
    await expect(wrongKey.createInvoice({ amount_sats: 1, memo: 'x', expiry_seconds: 60 })).rejects.toMatchObject({
      kind: 'unavailable',
      reason: expect.stringMatching(/HTTP 401/),
    });
    await expect(chargeproc.getStatus('doesnotexist', 1)).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/HTTP 404/) });

    server.faults.status = 502;
    try {
      await expect(chargeproc.getStatus('anything', 1)).rejects.toBeInstanceOf(ProviderUnavailableError);
    } finally {
      delete server.faults.status;
    }
    server.faults.delayMs = 3000;
    try {
      const impatient = new ChargeprocProvider({ url: server.url, apiKey: server.apiKey, lnbitsWallet: server.wallet, timeoutMs: 500 }, clock);
      await expect(impatient.createInvoice({ amount_sats: 1, memo: 'x', expiry_seconds: 60 })).rejects.toMatchObject({
        kind: 'unavailable',
        reason: expect.stringMatching(/no answer within 500 ms/),
      });
    } finally {
      delete server.faults.delayMs;
    }
  });

  it('a charge for another amount is not handed out (found from outside)', async () => {
    server.faults.billsSats = 1;
    try {
      await expect(chargeproc.createInvoice({ amount_sats: 2000, memo: 'x', expiry_seconds: 600 })).rejects.toMatchObject({
        kind: 'unavailable',
        reason: 'chargeproc POST /satspay/api/v1/charge: the charge is for 1 sats, not 2000',
      });
    } finally {
      delete server.faults.billsSats;
    }
  });
});
