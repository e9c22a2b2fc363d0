import { decode } from 'light-bolt11-decoder';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProviderUnavailableError } from '../src/providers/http.js';
import { LnbitsProvider } from '../src/providers/lnbits.js';
import { startLnbitsServer, type LnbitsServer } from './support/lnbits-server.js';

const clock = { nowMs: () => 1_800_000_000_000 };
let server: LnbitsServer;
let lnbits: LnbitsProvider;

beforeAll(async () => {
  server = await startLnbitsServer();
  lnbits = new LnbitsProvider({ url: server.url, invoiceKey: server.invoiceKey, timeoutMs: 10_000 }, clock);
});
afterAll(() => server?.close());

describe('LNbits adapter', () => {
  it('creates an incoming invoice with the invoice key and the documented body', async () => {
    const inv = await lnbits.createInvoice({ amount_sats: 21_000, memo: 'Gold (monthly)', expiry_seconds: 900, webhook_url: 'https://pay.example/cb' });
    const req = server.requests.at(-1)!;
    expect(req.method).toBe('POST');
    expect(req.path).toBe('/api/v1/payments');
    expect(req.headers['x-api-key']).toBe(server.invoiceKey);
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.body).toEqual({ out: false, amount: 21_000, memo: 'Gold (monthly)', expiry: 900, webhook: 'https://pay.example/cb' });

    const stored = server.invoices.get(inv.payment_hash)!;
    expect(inv).toEqual({
      payment_request: stored.payment_request,
      payment_hash: stored.payment_hash,
      provider_ref: stored.payment_hash,
      expires_at: 1_800_000_900,
    });
    const amount = decode(inv.payment_request).sections.find((s) => s.name === 'amount') as { value: string };
    expect(amount.value).toBe('21000000');
  });

  it('leaves the webhook out when there is none', async () => {
    await lnbits.createInvoice({ amount_sats: 5, memo: 'x', expiry_seconds: 60 });
    expect(server.requests.at(-1)!.body).toEqual({ out: false, amount: 5, memo: 'x', expiry: 60 });
  });

  it('reads the status by payment hash: unpaid, then paid', async () => {
    const inv = await lnbits.createInvoice({ amount_sats: 100, memo: 'status', expiry_seconds: 60 });
    expect(await lnbits.getStatus(inv.provider_ref, 100)).toEqual({ paid: false });
    const req = server.requests.at(-1)!;
    expect([req.method, req.path, req.headers['x-api-key']]).toEqual(['GET', `/api/v1/payments/${inv.payment_hash}`, server.invoiceKey]);
    server.pay(inv.payment_hash);
    expect(await lnbits.getStatus(inv.provider_ref, 100)).toEqual({ paid: true });
  });

  it('a wrong key, an unknown hash, a 5xx or no answer in time is ProviderUnavailableError (503)', async () => {
    const wrongKey = new LnbitsProvider({ url: server.url, invoiceKey: 'nope', timeoutMs: 10_000 }, clock);
    const e1 = await wrongKey.createInvoice({ amount_sats: 1, memo: 'x', expiry_seconds: 60 }).catch((e) => e);
    expect(e1).toBeInstanceOf(ProviderUnavailableError);
    expect(e1.kind).toBe('unavailable');
    expect(e1.reason).toMatch(/HTTP 401/);
    expect(e1.message).not.toMatch(/lnbits|401/i);

    await expect(lnbits.getStatus('ab'.repeat(32), 1)).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/HTTP 404/) });

    server.faults.status = 500;
    try {
      await expect(lnbits.createInvoice({ amount_sats: 1, memo: 'x', expiry_seconds: 60 })).rejects.toMatchObject({
        kind: 'unavailable',
        reason: expect.stringMatching(/HTTP 500/),
      });
    } finally {
      delete server.faults.status;
    }

    server.faults.delayMs = 3000;
    try {
      const impatient = new LnbitsProvider({ url: server.url, invoiceKey: server.invoiceKey, timeoutMs: 500 }, clock);
      const started = Date.now();
      await expect(impatient.createInvoice({ amount_sats: 1, memo: 'x', expiry_seconds: 60 })).rejects.toMatchObject({
        kind: 'unavailable',
        reason: expect.stringMatching(/no answer within 500 ms/),
      });
      expect(Date.now() - started).toBeLessThan(2500);
    } finally {
      delete server.faults.delayMs;
    }
  });

  it('an unreachable server is ProviderUnavailableError', async () => {
    const gone = new LnbitsProvider({ url: 'http://127.0.0.1:1', invoiceKey: 'k', timeoutMs: 500 }, clock);
    await expect(gone.getStatus('ab'.repeat(32), 1)).rejects.toBeInstanceOf(ProviderUnavailableError);
  });

  it('an invoice for another amount is not handed out, a paid answer for less is not paid, and the key never reaches an error (found from outside)', async () => {
    server.faults.billsSats = 1;
    try {
      await expect(lnbits.createInvoice({ amount_sats: 1000, memo: 'x', expiry_seconds: 60 })).rejects.toMatchObject({
        kind: 'unavailable',
        reason: 'lnbits POST /api/v1/payments: the invoice charges 1000 msat, not 1000 sats',
      });
      // An invoice made for 1 sat and paid: asked for a 1000-sat payment, it is not paid.
      const small = await lnbits.createInvoice({ amount_sats: 1, memo: 'x', expiry_seconds: 60 });
      server.pay(small.payment_hash);
      expect(await lnbits.getStatus(small.provider_ref, 1000)).toEqual({ paid: false });
      expect(await lnbits.getStatus(small.provider_ref, 1)).toEqual({ paid: true });
    } finally {
      delete server.faults.billsSats;
    }
    // A proxy's error page echoing the request's headers.
    server.faults.status = 502;
    server.faults.errorBody = `<html>bad gateway; request headers were {"x-api-key": "${server.invoiceKey}"}</html>`;
    try {
      const e = await lnbits.getStatus('ab'.repeat(32), 1).catch((err) => err);
      expect(e).toBeInstanceOf(ProviderUnavailableError);
      expect(e.reason).toContain('HTTP 502');
      expect(e.reason).not.toContain(server.invoiceKey);
    } finally {
      delete server.faults.status;
      delete server.faults.errorBody;
    }
  });

  it('an answer without end is cut at 1 MiB: unavailable, and the process does not hold it', async () => {
    const { createServer } = await import('node:http');
    const endless = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const more = () => {
        while (res.write(chunk)) {
          /* until the socket pushes back */
        }
      };
      res.on('drain', more);
      res.on('error', () => undefined);
      more();
    });
    await new Promise<void>((r) => endless.listen(0, '127.0.0.1', () => r()));
    try {
      const p = new LnbitsProvider({ url: `http://127.0.0.1:${(endless.address() as { port: number }).port}`, invoiceKey: 'k', timeoutMs: 5000 }, clock);
      await expect(p.getStatus('ab'.repeat(32), 1)).rejects.toMatchObject({
        kind: 'unavailable',
        reason: expect.stringMatching(/answer larger than 1048576 bytes/),
      });
    } finally {
      endless.closeAllConnections();
      endless.close();
    }
  });
});
