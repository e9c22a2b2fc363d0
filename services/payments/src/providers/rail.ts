import type { PaymentMethod, PaymentPurpose } from '@sb/contracts';
import type { PaymentRecord, ProviderName } from '../domain/payments.js';
import type { FiatQuote } from '../rates.js';
import type { LightningProvider } from './lightning.js';

/** What `payments.provider` records: the adapter that opened the payment and can be asked about it. */

/** A plan's per-rail settings (the owner's watch-only wallet, connected card account, payee merchant). */
export interface PlanRailSettings {
  watchonly_wallet_id?: string | null;
  cardproc_account_id?: string | null;
  walletproc_merchant_id?: string | null;
}

export interface RailRequest {
  /** Chosen before the provider is called, so the provider can carry it back (metadata, custom_id). */
  payment_id: string;
  wallet_id: string;
  subscription_id: string;
  /** The plan's checkout page follows the payment: where a processor sends the payer back. */
  plan_id: string;
  amount_sats: number;
  /** Shown to the payer. */
  memo: string;
  expiry_seconds: number;
  purpose: PaymentPurpose;
  plan: PlanRailSettings;
  /** Present for rails that charge in fiat (`needsFiat`). */
  fiat?: FiatQuote;
}

/** Where a processor sends the payer once they are done on its page (the checkout page following the payment). */
export type PayerReturnUrl = (req: Pick<RailRequest, 'plan_id' | 'payment_id'>) => string;

/** What a rail made at its provider; the payment row is built from it. */
export interface OpenedPayment {
  provider_ref: string | null;
  /** Unix seconds, from this service's clock. */
  expires_at: number;
  payment_request?: string;
  payment_hash?: string;
  onchain_address?: string;
  checkout_url?: string;
  cardproc_payment_id?: string;
  walletproc_order_id?: string;
  /** The owner's watch-only wallet and the receive index the address was derived at. */
  watchonly_wallet_id?: string;
  derivation_index?: number;
  /** DEV PROVIDER invoices only: their preimage (see `payments.dev_preimage`). */
  dev_preimage?: string;
}

export interface ProviderStatus {
  paid: boolean;
  /** The provider says it will never be paid (declined, denied). */
  failed?: boolean;
  onchain_txid?: string;
  /** The card processor's payment (Stripe's PaymentIntent id) of a paid checkout. */
  cardproc_payment_id?: string;
  /**
   * The provider says paid, but not for the fiat amount and currency recorded on the payment: why. The
   * payment is not marked paid (it stays as it is, for the owner to look into); the caller logs it.
   */
  mismatch?: string;
}

/**
 * One payment method as the payments service sees it. Each adapter speaks its provider's real wire
 * format; `status` is the provider's truth about a payment (callbacks are only hints to ask it).
 */
export interface Rail {
  readonly method: PaymentMethod;
  readonly provider: ProviderName;
  /** Card and wallet processors charge a fiat amount converted from the plan's sats. */
  readonly needsFiat: boolean;
  open(req: RailRequest): Promise<OpenedPayment>;
  /** Absent where there is nothing to ask (the dev provider is paid through its dev endpoint only). */
  status?(p: PaymentRecord): Promise<ProviderStatus>;
  /** Closes the payment at the provider when we expire it early (cancel, plan archive, replaced renewal); best effort. */
  cancel?(p: PaymentRecord): Promise<void>;
  /** How long after expiry `status` is still asked (seconds); unset: the sweeper's default. */
  readonly lateWindowS?: number;
  /** No payment of this rail is asked about again sooner (seconds); unset: the sweeper's default. */
  readonly recheckAfterS?: number;
}

export type Rails = Partial<Record<PaymentMethod, Rail>>;

/**
 * The Lightning rail over any Lightning provider (dev, LNbits, charge server). NWC payments are the same
 * invoices (method 'nwc'), paid by the subscriber's connected wallet instead of by hand.
 */
export function lightningRail(p: LightningProvider, webhookUrl?: string, method: 'lightning' | 'nwc' = 'lightning'): Rail {
  return {
    method,
    provider: p.name,
    needsFiat: false,
    async open(req) {
      const inv = await p.createInvoice({
        amount_sats: req.amount_sats,
        memo: req.memo,
        expiry_seconds: req.expiry_seconds,
        ...(webhookUrl ? { webhook_url: webhookUrl } : {}),
      });
      return {
        provider_ref: inv.provider_ref,
        expires_at: inv.expires_at,
        payment_request: inv.payment_request,
        payment_hash: inv.payment_hash,
        ...(inv.dev_preimage ? { dev_preimage: inv.dev_preimage } : {}),
      };
    },
    ...(p.name === 'dev' ? {} : { status: (r: PaymentRecord) => p.getStatus(r.provider_ref!, r.amount_sats) }),
  };
}

/** The rail of this deployment that opened `p` and can be asked about it (none for the dev provider). */
export function railOf(rails: Rails, p: Pick<PaymentRecord, 'provider' | 'payment_method'>): Rail | undefined {
  const rail = rails[p.payment_method];
  return rail?.provider === p.provider && rail.status ? rail : undefined;
}
