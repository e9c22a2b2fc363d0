import { type Clock, type Logger, rejected, unixSeconds } from '@sb/runtime';
import { callbackRef } from '../domain/payments.js';
import type { CallbackReader, PaymentLookup } from './callback.js';
import { checkInvoice, type CreateInvoiceInput, type Invoice, type LightningProvider } from './lightning.js';
import { fetchJson, logProviderFailure, ProviderUnavailableError } from './http.js';
import { type Rail, type Rails, railOf } from './rail.js';
import { secretSetting, urlSetting } from './http.js';

interface ChargeprocSettings {
  url: string;
  apiKey: string;
  /** The charge server's Lightning wallet; without it charges carry no invoice. */
  lnbitsWallet?: string;
  /** The charge server's watch-only on-chain wallet; without it charges carry no address. */
  onchainWallet?: string;
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
  onchainaddress?: string | null;
}

interface ChargeInput extends CreateInvoiceInput {
  lightning: boolean;
  onchain: boolean;
}

/**
 * Paid when the charge's balance covers the payment's own amount (providers.md: `paid` is `balance >=
 * amount`): not on the charge's `paid` flag or its own `amount` alone, which a charge made for less would
 * satisfy. An underpayment stays unpaid.
 */
export function chargeIsPaid(c: Pick<Charge, 'balance'>, amountSats: number): boolean {
  return typeof c.balance === 'number' && amountSats > 0 && c.balance >= amountSats;
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

  /** One charge: a Lightning invoice, an on-chain address, or both (one payment, whichever arrives). */
  async createCharge(input: ChargeInput): Promise<{ charge: Charge; expires_at: number }> {
    const minutes = Math.max(1, Math.ceil(input.expiry_seconds / 60));
    const body: Record<string, unknown> = { description: input.memo, amount: input.amount_sats, time: minutes };
    if (input.lightning) body.lnbitswallet = this.s.lnbitsWallet;
    if (input.onchain) body.onchainwallet = this.s.onchainWallet;
    if (input.webhook_url) body.webhook = input.webhook_url;
    if (this.s.completeLink) body.completelink = this.s.completeLink;
    const charge = (await fetchJson('chargeproc', `${this.s.url}/satspay/api/v1/charge`, {
      method: 'POST',
      apiKey: this.s.apiKey,
      body,
      timeoutMs: this.s.timeoutMs,
    })) as Partial<Charge> | undefined;
    const lacks = [
      typeof charge?.id === 'string' && charge.id ? null : 'id',
      !input.lightning || (typeof charge?.payment_request === 'string' && typeof charge.payment_hash === 'string') ? null : 'payment_request',
      !input.onchain || (typeof charge?.onchainaddress === 'string' && charge.onchainaddress) ? null : 'onchainaddress',
    ].filter(Boolean);
    if (lacks.length) throw new ProviderUnavailableError(`chargeproc POST /satspay/api/v1/charge: answer lacks ${lacks.join(', ')}`);
    if (typeof charge!.amount === 'number' && charge!.amount !== input.amount_sats) {
      throw new ProviderUnavailableError(`chargeproc POST /satspay/api/v1/charge: the charge is for ${charge!.amount} sats, not ${input.amount_sats}`);
    }
    if (input.lightning)
      checkInvoice(
        'chargeproc POST /satspay/api/v1/charge',
        { payment_request: charge!.payment_request!, payment_hash: charge!.payment_hash! },
        input.amount_sats,
      );
    const validMinutes = typeof charge!.time === 'number' && charge!.time > 0 ? charge!.time : minutes;
    return { charge: charge as Charge, expires_at: unixSeconds(this.clock) + validMinutes * 60 };
  }

  async createInvoice(input: CreateInvoiceInput): Promise<Invoice> {
    const { charge, expires_at } = await this.createCharge({ ...input, lightning: true, onchain: false });
    return { payment_request: charge.payment_request!, payment_hash: charge.payment_hash!, provider_ref: charge.id, expires_at };
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

  async getStatus(providerRef: string, amountSats: number): Promise<{ paid: boolean }> {
    return { paid: chargeIsPaid(await this.getCharge(providerRef), amountSats) };
  }
}

/**
 * On-chain through the charge server: one charge with an address and, when the server also has a
 * Lightning wallet, an invoice for the same amount, so the payer may use either (BIP21 with `lightning=`).
 */
export function chargeprocOnchainRail(
  p: ChargeprocProvider,
  o: { withLightning: boolean; webhookUrl?: string; lateWindowS: number; recheckAfterS: number },
): Rail {
  const { withLightning, webhookUrl } = o;
  return {
    method: 'onchain',
    provider: 'chargeproc',
    needsFiat: false,
    // A transaction can confirm long after the charge expired; its callback may have been lost.
    lateWindowS: o.lateWindowS,
    recheckAfterS: o.recheckAfterS,
    async open(req) {
      const { charge, expires_at } = await p.createCharge({
        amount_sats: req.amount_sats,
        memo: req.memo,
        expiry_seconds: req.expiry_seconds,
        lightning: withLightning,
        onchain: true,
        ...(webhookUrl ? { webhook_url: webhookUrl } : {}),
      });
      return {
        provider_ref: charge.id,
        expires_at,
        onchain_address: charge.onchainaddress!,
        ...(charge.payment_request ? { payment_request: charge.payment_request, payment_hash: charge.payment_hash! } : {}),
      };
    },
    status: (r) => p.getStatus(r.provider_ref!, r.amount_sats),
  };
}

/**
 * Callbacks on `/public/webhook/chargeproc` (POST and its GET twin): the charge server's charge
 * (Lightning or on-chain), and LNbits' payment webhook when LNbits is the provider. The body is never
 * trusted: only the charge id (or payment hash) is read from it, and the provider is asked for the
 * payment's status, so a forged or repeated callback can only make us ask again. An unknown id or a
 * malformed body is refused; a provider that cannot be asked is 503, so the provider calls again.
 */
export function chargeServerCallbacks(rails: Rails, payments: PaymentLookup, log: Logger): CallbackReader {
  return {
    provider: 'chargeproc',
    async read(body) {
      const ref = callbackRef(Buffer.from(body.raw, 'base64'));
      const payment = ref && (await payments.byProviderRef(ref.provider, ref.ref));
      const rail = payment && railOf(rails, payment);
      if (!payment || !rail?.status) throw rejected('Invalid callback');
      if (payment.status === 'paid') return null;
      const status = rail.status.bind(rail);
      return {
        payment,
        label: 'charge',
        outcome: async () => {
          const s = await logProviderFailure(log, { payment_id: payment.id, provider: rail.provider }, () => status(payment));
          if (s.paid) return { paid: true, details: { onchain_txid: s.onchain_txid, cardproc_payment_id: s.cardproc_payment_id } };
          return s.failed ? { failed: `${payment.provider} reports the payment failed` } : { nothing: true, warning: s.mismatch };
        },
      };
    },
  };
}

/** The charge server (SatsPay; LIGHTNING_PROVIDER / ONCHAIN_PROVIDER=chargeproc): its settings, gathered into the payments configuration by the registry. */
export const chargeprocSettings = {
  CHARGEPROC_URL: urlSetting.optional(),
  CHARGEPROC_API_KEY: secretSetting.optional(),
  CHARGEPROC_LNBITS_WALLET: secretSetting.optional(),
  /** The charge server's on-chain (watch-only) wallet id, for ONCHAIN_PROVIDER=chargeproc. */
  CHARGEPROC_ONCHAIN_WALLET: secretSetting.optional(),
};
