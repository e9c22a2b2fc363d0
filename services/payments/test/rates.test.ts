import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RateSource, RateUnavailableError, satsToFiat } from '../src/rates.js';
import { startFakeServer, type FakeServer } from './support/http-fake.js';

/** A CoinGecko-style simple-price source: `{"bitcoin": {"<currency>": <price>}}`. */
let price = 60_000;
let body: unknown;
let source: FakeServer;

beforeAll(async () => {
  source = await startFakeServer((req) =>
    req.path === '/api/v3/simple/price' ? { status: 200, body: body ?? { bitcoin: { usd: price, eur: price * 0.9 } } } : undefined,
  );
});
afterAll(() => source?.close());

const url = () => `${source.url}/api/v3/simple/price`;

async function rejection(p: Promise<unknown>): Promise<RateUnavailableError> {
  const err = await p.then(
    () => undefined,
    (e) => e,
  );
  if (!(err instanceof RateUnavailableError)) throw new Error(`expected RateUnavailableError, got ${err}`);
  return err;
}

describe('satsToFiat', () => {
  it("rounds to the currency's smallest unit, never below one unit", () => {
    expect(satsToFiat(2_100, 60_000)).toBe(1.26);
    expect(satsToFiat(2_100, 60_000, 'eur')).toBe(1.26);
    expect(satsToFiat(210_000, 15_000_000, 'jpy')).toBe(31_500);
    expect(satsToFiat(2_099, 15_000_000, 'jpy')).toBe(315); // 314.85 yen: whole yen
    expect(satsToFiat(2_100, 30_000, 'kwd')).toBe(0.63);
    expect(satsToFiat(12_345, 31_234.567, 'kwd')).toBe(3.856); // three decimals
    expect(satsToFiat(1, 60_000)).toBe(0.01);
    expect(satsToFiat(1, 60_000, 'jpy')).toBe(1);
  });
});

describe('RateSource', () => {
  it('fetches the price, keeps it for the TTL, and shares one fetch between concurrent callers', async () => {
    let now = 1_000_000;
    const rates = new RateSource({ currency: 'usd', url: url(), ttlMs: 60_000, timeoutMs: 2000 }, () => now);
    const before = source.requests.length;
    const quotes = await Promise.all([rates.quote(2_100), rates.quote(2_100), rates.quote(100_000)]);
    expect(quotes).toEqual([
      { amount: 1.26, currency: 'usd', rate: 60_000 },
      { amount: 1.26, currency: 'usd', rate: 60_000 },
      { amount: 60, currency: 'usd', rate: 60_000 },
    ]);
    expect(source.requests.length - before).toBe(1);

    price = 70_000;
    now += 59_000;
    expect((await rates.quote(2_100)).rate).toBe(60_000); // still cached
    now += 2_000;
    expect(await rates.quote(2_100)).toEqual({ amount: 1.47, currency: 'usd', rate: 70_000 });
    expect(source.requests.length - before).toBe(2);
  });

  it('answers 503 when the source fails or answers something else, and never makes a rate up', async () => {
    const rates = new RateSource({ currency: 'usd', url: url(), ttlMs: 0, timeoutMs: 300 });
    source.faults.status = 500;
    try {
      const failed = await rejection(rates.quote(2_100));
      expect(failed.kind).toBe('unavailable');
      expect(failed.message).toMatch(/exchange rate/);
      expect(failed.reason).toMatch(/HTTP 500/);
    } finally {
      source.faults.status = undefined;
    }
    for (const bad of [{ bitcoin: { eur: 1 } }, { bitcoin: { usd: -5 } }, { bitcoin: { usd: '60000' } }, []]) {
      body = bad;
      expect((await rejection(rates.quote(2_100))).reason).toMatch(/bitcoin\.usd/);
    }
    body = undefined;
    source.faults.delayMs = 1000;
    try {
      expect((await rejection(rates.quote(2_100))).kind).toBe('unavailable');
    } finally {
      source.faults.delayMs = undefined;
    }
    const none = new RateSource({ currency: 'usd', ttlMs: 0, timeoutMs: 300 });
    expect(none.configured).toBe(false);
    expect((await rejection(none.quote(1))).kind).toBe('unavailable');
  });

  it('a fixed rate needs no source', async () => {
    const fixed = new RateSource({ currency: 'jpy', fixed: 15_000_000, ttlMs: 0, timeoutMs: 300 });
    expect(await fixed.quote(2_099)).toEqual({ amount: 315, currency: 'jpy', rate: 15_000_000 });
  });
});
