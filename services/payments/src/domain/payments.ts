import type { Payment, PaymentEventData, PaymentMethod, PaymentPurpose, PaymentStatus } from '@sb/contracts';

/** Who made a payment (and is asked about it): the rail's provider. */
export type ProviderName = 'dev' | 'lnbits' | 'chargeproc' | 'esplora' | 'stripe' | 'paypal';

/** A payment as stored: the contract's Payment plus what this service needs to confirm and announce it. */
export interface PaymentRecord {
  id: string;
  wallet_id: string;
  subscription_id: string;
  plan_id: string;
  plan_name: string;
  amount_sats: number;
  status: PaymentStatus;
  payment_method: PaymentMethod;
  purpose: PaymentPurpose;
  payment_request: string | null;
  payment_hash: string | null;
  provider: ProviderName;
  provider_ref: string | null;
  onchain_address: string | null;
  onchain_txid: string | null;
  /** Where the payer completes a card or wallet-processor payment. */
  checkout_url: string | null;
  amount_fiat: number | null;
  currency: string | null;
  /** Fiat per bitcoin used for `amount_fiat`. */
  fiat_rate: number | null;
  cardproc_payment_id: string | null;
  walletproc_order_id: string | null;
  failure_reason: string | null;
  /** On-chain to an owner's watch-only wallet: which one, and the receive index of `onchain_address`. */
  watchonly_wallet_id: string | null;
  derivation_index: number | null;
  expires_at: number;
  paid_at: number | null;
  created_at: number;
  idempotency_key: string;
  /** Paid, but billing could not apply it to any subscription: why (the owner refunds it). */
  unapplied_reason?: string | null;
  /** When billing applied it to a subscription. */
  applied_at?: number | null;
  /** Withdrawn because this other payment started its subscription (a late payment of an earlier checkout). */
  replaced_by?: string | null;
  /** The period billing applied it to. */
  period_start?: number | null;
  period_end?: number | null;
  version: number;
}

type PaymentChange = 'confirm' | 'expire' | 'fail';

/**
 * The whole payment state machine. A provider confirming after expiry still counts (an invoice paid in
 * the last second, a late on-chain transaction): the money arrived, so it is recorded and applied. Paid
 * and failed are final.
 */
export const PAYMENT_TRANSITIONS: Record<PaymentStatus, Partial<Record<PaymentChange, PaymentStatus>>> = {
  pending: { confirm: 'paid', expire: 'expired', fail: 'failed' },
  expired: { confirm: 'paid' },
  paid: {},
  failed: {},
};

/** The states from which `change` is allowed: the compare part of the store's compare-and-set. */
export function statesAllowing(change: PaymentChange): { from: PaymentStatus[]; to: PaymentStatus } {
  const from = (Object.keys(PAYMENT_TRANSITIONS) as PaymentStatus[]).filter((s) => PAYMENT_TRANSITIONS[s][change]);
  const to = PAYMENT_TRANSITIONS[from[0]!][change]!;
  return { from, to };
}

/** The resource as the API shows it (never the wallet, provider or idempotency key). */
export function toPayment(r: PaymentRecord): Payment {
  return {
    id: r.id,
    subscription_id: r.subscription_id,
    amount_sats: r.amount_sats,
    amount_fiat: r.amount_fiat,
    currency: r.currency,
    status: r.status,
    payment_method: r.payment_method,
    payment_request: r.payment_request,
    payment_hash: r.payment_hash,
    onchain_address: r.onchain_address,
    onchain_txid: r.onchain_txid,
    cardproc_payment_id: r.cardproc_payment_id,
    walletproc_order_id: r.walletproc_order_id,
    created_at: r.created_at,
    paid_at: r.paid_at,
    ...(r.unapplied_reason ? { unapplied_reason: r.unapplied_reason } : {}),
    ...(r.replaced_by && r.status === 'expired' ? { replaced_by: r.replaced_by } : {}),
    ...(r.period_start != null && r.period_end != null && r.status === 'paid'
      ? { period_start: Number(r.period_start), period_end: Number(r.period_end) }
      : {}),
  };
}

/** Data of `payment.received`: what billing needs to apply the payment to its subscription exactly once. */
export function paymentReceivedData(r: PaymentRecord): PaymentEventData {
  return {
    subscription_id: r.subscription_id,
    plan_id: r.plan_id,
    plan_name: r.plan_name,
    payment_id: r.id,
    amount_sats: r.amount_sats,
    payment_method: r.payment_method,
    purpose: r.purpose,
    status: 'paid',
    paid_at: r.paid_at,
    ...(r.amount_fiat !== null && r.currency ? { amount_fiat: r.amount_fiat, currency: r.currency } : {}),
  };
}

/** Which payment a provider callback names. Only this is taken from a callback; the rest is re-read from the provider. */
type CallbackRef = { provider: 'chargeproc'; ref: string } | { provider: 'lnbits'; ref: string };

const REF = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * Reads the payment reference out of a callback body: the charge server's charge (its `id`), sent as a
 * JSON body, as a JSON-encoded string of that JSON, or with GET; or LNbits' payment (its
 * `payment_hash`). Anything else is undefined.
 */
export function callbackRef(raw: Buffer): CallbackRef | undefined {
  let value: unknown;
  try {
    value = JSON.parse(raw.toString('utf8'));
    if (typeof value === 'string') value = JSON.parse(value);
  } catch {
    return undefined;
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const o = value as Record<string, unknown>;
  if (typeof o.id === 'string' && REF.test(o.id)) return { provider: 'chargeproc', ref: o.id };
  if (o.id === undefined && typeof o.payment_hash === 'string' && /^[0-9a-fA-F]{64}$/.test(o.payment_hash)) {
    return { provider: 'lnbits', ref: o.payment_hash.toLowerCase() };
  }
  return undefined;
}
