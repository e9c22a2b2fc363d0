import { unixSeconds, type Clock } from '@sb/runtime';
import { checkInvoice, type CreateInvoiceInput, type Invoice, type LightningProvider } from './lightning.js';
import { fetchJson, ProviderUnavailableError } from './http.js';
import { secretSetting, urlSetting } from './http.js';

interface LnbitsSettings {
  url: string;
  invoiceKey: string;
  timeoutMs: number;
}

/**
 * LNbits wallet API: an incoming invoice per payment (`POST /api/v1/payments`, `out: false`), its status
 * from `GET /api/v1/payments/{payment_hash}`. The webhook LNbits sends is unsigned, so it is only a hint
 * to re-read the status here.
 */
export class LnbitsProvider implements LightningProvider {
  readonly name = 'lnbits' as const;

  constructor(
    private readonly s: LnbitsSettings,
    private readonly clock: Clock,
  ) {}

  async createInvoice(input: CreateInvoiceInput): Promise<Invoice> {
    const body: Record<string, unknown> = {
      out: false,
      amount: input.amount_sats,
      memo: input.memo,
      expiry: input.expiry_seconds,
    };
    if (input.webhook_url) body.webhook = input.webhook_url;
    const res = await fetchJson('lnbits', `${this.s.url}/api/v1/payments`, { method: 'POST', apiKey: this.s.invoiceKey, body, timeoutMs: this.s.timeoutMs });
    // Older LNbits answer `payment_request`, newer ones `bolt11`.
    const payment_request = res?.payment_request ?? res?.bolt11;
    const payment_hash = res?.payment_hash;
    if (typeof payment_request !== 'string' || typeof payment_hash !== 'string' || !/^[0-9a-f]{64}$/i.test(payment_hash)) {
      throw new ProviderUnavailableError('lnbits POST /api/v1/payments: answer lacks payment_request or payment_hash');
    }
    checkInvoice('lnbits POST /api/v1/payments', { payment_request, payment_hash }, input.amount_sats);
    return {
      payment_request,
      payment_hash: payment_hash.toLowerCase(),
      provider_ref: payment_hash.toLowerCase(),
      expires_at: unixSeconds(this.clock) + input.expiry_seconds,
    };
  }

  async getStatus(providerRef: string, amountSats: number): Promise<{ paid: boolean }> {
    const res = await fetchJson('lnbits', `${this.s.url}/api/v1/payments/${encodeURIComponent(providerRef)}`, {
      method: 'GET',
      apiKey: this.s.invoiceKey,
      timeoutMs: this.s.timeoutMs,
    });
    // details.amount is in msat; an answer that says paid for less is not this payment paid.
    const msat = res?.details?.amount;
    return { paid: res?.paid === true && (typeof msat !== 'number' || msat >= amountSats * 1000) };
  }
}

/** LNbits (LIGHTNING_PROVIDER=lnbits): its settings, gathered into the payments configuration by the registry. */
export const lnbitsSettings = {
  LNBITS_URL: urlSetting.optional(),
  LNBITS_INVOICE_KEY: secretSetting.optional(),
};
