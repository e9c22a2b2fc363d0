import { ProviderUnavailableError } from './providers/http.js';

/** A fiat amount for a sats amount, with the rate it was converted at (fiat per bitcoin). */
export interface FiatQuote {
  amount: number;
  currency: string;
  rate: number;
}

interface RateSourceSettings {
  currency: string;
  /** CoinGecko-style simple-price URL answering `{"bitcoin": {"<currency>": <price>}}`. */
  url?: string;
  /** A fixed price per bitcoin (dev runs, or a deployment that sets its own rate). */
  fixed?: number;
  ttlMs: number;
  timeoutMs: number;
}

export class RateUnavailableError extends ProviderUnavailableError {
  constructor(reason: string) {
    super(reason, 'No exchange rate is available right now, so fiat payments cannot be priced; try again shortly');
    this.name = 'RateUnavailableError';
  }
}

// ISO 4217 minor units where they are not 2, as Stripe lists them (https://docs.stripe.com/currencies#special-cases).
const ZERO_DECIMAL = new Set(['bif', 'clp', 'djf', 'gnf', 'jpy', 'kmf', 'krw', 'mga', 'pyg', 'rwf', 'ugx', 'vnd', 'vuv', 'xaf', 'xof', 'xpf']);
const THREE_DECIMAL = new Set(['bhd', 'jod', 'kwd', 'omr', 'tnd']);

/** How many decimals an amount of `currency` (any case) has: 0 (JPY), 3 (KWD) or, for most, 2. */
export function currencyExponent(currency: string): 0 | 2 | 3 {
  const c = currency.toLowerCase();
  return ZERO_DECIMAL.has(c) ? 0 : THREE_DECIMAL.has(c) ? 3 : 2;
}

/**
 * Rounded to the currency's smallest unit (cents; whole yen), never below one such unit: a processor
 * cannot charge nothing, and the recorded amount is what the processor charges.
 */
export function satsToFiat(sats: number, ratePerBtc: number, currency = 'usd'): number {
  const unit = 10 ** currencyExponent(currency);
  return Math.max(1, Math.round((sats * ratePerBtc * unit) / 1e8)) / unit;
}

/**
 * The price of a bitcoin in the deployment's currency, fetched from the configured source and kept for
 * `ttlMs`; concurrent callers share one fetch. A failed fetch is a 503 (the caller may retry), never a
 * made-up rate.
 */
export class RateSource {
  private cached?: { rate: number; at: number };
  private inflight?: Promise<number>;

  constructor(
    private readonly s: RateSourceSettings,
    private readonly nowMs: () => number = Date.now,
  ) {}

  get configured(): boolean {
    return this.s.fixed !== undefined || this.s.url !== undefined;
  }

  async quote(sats: number): Promise<FiatQuote> {
    const rate = await this.rate();
    return { amount: satsToFiat(sats, rate, this.s.currency), currency: this.s.currency, rate };
  }

  async rate(): Promise<number> {
    if (this.s.fixed !== undefined) return this.s.fixed;
    if (!this.s.url) throw new RateUnavailableError('no FIAT_RATE_URL or FIAT_RATE_FIXED is set');
    if (this.cached && this.nowMs() - this.cached.at < this.s.ttlMs) return this.cached.rate;
    this.inflight ??= this.fetchRate().finally(() => (this.inflight = undefined));
    return this.inflight;
  }

  private async fetchRate(): Promise<number> {
    // biome-ignore lint/suspicious/noExplicitAny: the rate source's JSON, checked below.
    let body: any;
    try {
      const res = await fetch(this.s.url!, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(this.s.timeoutMs) });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      body = await res.json();
    } catch (err) {
      throw new RateUnavailableError(`rate source: ${(err as Error).message}`);
    }
    const rate = body?.bitcoin?.[this.s.currency];
    if (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0) {
      throw new RateUnavailableError(`rate source: no positive bitcoin.${this.s.currency} in the answer`);
    }
    this.cached = { rate, at: this.nowMs() };
    return rate;
  }
}
