import { unixSeconds, type Clock } from '@sb/runtime';
import { fetchJson, ProviderUnavailableError, type CreateInvoiceInput, type Invoice, type LightningProvider } from './lightning.js';

export interface ChargeprocSettings {
  url: string;
  apiKey: string;
  lnbitsWallet: string;
  timeoutMs: number;
  /** Where the charge page sends the payer once paid; omitted when unset. */
  completeLink?: string;
}

/** The charge as the charge server (LNbits SatsPay) answers it; only what this service reads. */
export interface Charge {
  id: string;
  amount: number;
  balance: number;
  paid?: boolean;
  time: number;
  payment_request?: string | null;
  payment_hash?: string | null;
}

/** Paid when the charge says so or its balance covers its amount (an underpayment stays unpaid). */
export function chargeIsPaid(c: Pick<Charge, 'amount' | 'balance' | 'paid'>): boolean {
  return c.paid === true || (typeof c.balance === 'number' && typeof c.amount === 'number' && c.amount > 0 && c.balance >= c.amount);
}

/**
 * Charge server (LNbits SatsPay): one charge per payment with a Lightning invoice from `lnbitswallet`.
 * `POST /satspay/api/v1/charge` creates it, `GET /satspay/api/v1/charge/{id}` is the only truth about
 * whether it is paid (callbacks carry just the id worth trusting).
 */
export class ChargeprocProvider implements LightningProvider {
  readonly name = 'chargeproc' as const;

  constructor(
    private readonly s: ChargeprocSettings,
    private readonly clock: Clock,
  ) {}

  async createInvoice(input: CreateInvoiceInput): Promise<Invoice> {
    const minutes = Math.max(1, Math.ceil(input.expiry_seconds / 60));
    const body: Record<string, unknown> = {
      lnbitswallet: this.s.lnbitsWallet,
      description: input.memo,
      amount: input.amount_sats,
      time: minutes,
    };
    if (input.webhook_url) body.webhook = input.webhook_url;
    if (this.s.completeLink) body.completelink = this.s.completeLink;
    const charge = (await fetchJson('chargeproc', `${this.s.url}/satspay/api/v1/charge`, {
      method: 'POST',
      apiKey: this.s.apiKey,
      body,
      timeoutMs: this.s.timeoutMs,
    })) as Partial<Charge> | undefined;
    if (typeof charge?.id !== 'string' || !charge.id || typeof charge.payment_request !== 'string' || typeof charge.payment_hash !== 'string') {
      throw new ProviderUnavailableError('chargeproc POST /satspay/api/v1/charge: answer lacks id, payment_request or payment_hash');
    }
    const validMinutes = typeof charge.time === 'number' && charge.time > 0 ? charge.time : minutes;
    return {
      payment_request: charge.payment_request,
      payment_hash: charge.payment_hash,
      provider_ref: charge.id,
      expires_at: unixSeconds(this.clock) + validMinutes * 60,
    };
  }

  async getCharge(id: string): Promise<Charge> {
    const charge = await fetchJson('chargeproc', `${this.s.url}/satspay/api/v1/charge/${encodeURIComponent(id)}`, {
      method: 'GET',
      apiKey: this.s.apiKey,
      timeoutMs: this.s.timeoutMs,
    });
    if (charge?.id !== id) throw new ProviderUnavailableError('chargeproc GET /satspay/api/v1/charge: answer is not the charge asked for');
    return charge as Charge;
  }

  async getStatus(providerRef: string): Promise<{ paid: boolean }> {
    return { paid: chargeIsPaid(await this.getCharge(providerRef)) };
  }
}
