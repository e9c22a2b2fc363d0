import { ID_PREFIXES, messages, type CreatePayment } from '@sb/contracts';
import { conflict, messageHandler, newId, invalid } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { checkoutOf } from '../domain/checkout.js';
import { toPayment, type PaymentRecord } from '../domain/payments.js';
import { logProviderFailure } from '../providers/http.js';

const notConfigured = (method: string) => invalid(['payment_method'], `${method} payments are not configured on this server`, 'provider_not_configured');

/** The same key may only ever name the same payment. */
function sameRequest(p: PaymentRecord, r: CreatePayment): boolean {
  return p.subscription_id === r.subscription_id && p.amount_sats === r.amount_sats && p.payment_method === r.payment_method;
}

async function created(p: PaymentRecord) {
  return { payment: toPayment(p), checkout: await checkoutOf(p) };
}

/**
 * Opens a payment on the rail of its method: an invoice, an address or a processor checkout, stored
 * `pending`. Idempotent on (wallet, idempotency key): a retry answers the payment the first call made.
 * Two racing first calls may both reach the provider; only one payment is stored and both answer it
 * (the other provider object simply expires unpaid).
 */
export const createPaymentHandler = (d: Deps) =>
  messageHandler(messages.createPayment, async (req) => {
    const rail = d.rails[req.payment_method];
    if (!rail) throw notConfigured(req.payment_method);

    const existing = await d.payments.byIdempotencyKey(d.db, req.wallet_id, req.idempotency_key);
    if (existing) {
      if (!sameRequest(existing, req)) throw conflict('Idempotency key was already used for another payment');
      return created(existing);
    }

    const nowMs = d.clock.nowMs();
    const now = Math.floor(nowMs / 1000);
    if (req.expires_at - now < 1) throw invalid(['expires_at'], 'expires_at must be in the future');
    const expirySeconds = Math.min(req.expires_at - now, d.invoiceMaxExpiryS);
    const fiat = rail.needsFiat ? await logProviderFailure(d.log, { rail: 'fiat rate' }, () => d.rates.quote(req.amount_sats)) : undefined;
    const id = newId(ID_PREFIXES.payment, nowMs);
    const opened = await logProviderFailure(d.log, { subscription_id: req.subscription_id, provider: rail.provider }, () =>
      rail.open({
        payment_id: id,
        wallet_id: req.wallet_id,
        subscription_id: req.subscription_id,
        amount_sats: req.amount_sats,
        memo: req.description,
        expiry_seconds: expirySeconds,
        purpose: req.purpose,
        plan: req.plan_settings ?? {},
        ...(fiat ? { fiat } : {}),
      }),
    );
    const record: Omit<PaymentRecord, 'version'> = {
      id,
      wallet_id: req.wallet_id,
      subscription_id: req.subscription_id,
      plan_id: req.plan_id,
      plan_name: req.plan_name,
      amount_sats: req.amount_sats,
      status: 'pending',
      payment_method: req.payment_method,
      purpose: req.purpose,
      payment_request: opened.payment_request ?? null,
      payment_hash: opened.payment_hash ?? null,
      provider: rail.provider,
      provider_ref: opened.provider_ref,
      onchain_address: opened.onchain_address ?? null,
      onchain_txid: null,
      checkout_url: opened.checkout_url ?? null,
      amount_fiat: fiat?.amount ?? null,
      currency: fiat?.currency ?? null,
      fiat_rate: fiat?.rate ?? null,
      cardproc_payment_id: opened.cardproc_payment_id ?? null,
      walletproc_order_id: opened.walletproc_order_id ?? null,
      failure_reason: null,
      watchonly_wallet_id: opened.watchonly_wallet_id ?? null,
      derivation_index: opened.derivation_index ?? null,
      expires_at: Math.min(now + expirySeconds, opened.expires_at),
      paid_at: null,
      created_at: now,
      idempotency_key: req.idempotency_key,
    };
    const stored =
      (await d.payments.insert(d.db, record, rail.provider === 'dev' ? (opened.dev_preimage ?? null) : null)) ??
      (await d.payments.byIdempotencyKey(d.db, req.wallet_id, req.idempotency_key));
    if (!stored) throw new Error('payment vanished after an idempotency conflict');
    if (stored.id !== record.id && !sameRequest(stored, req)) throw conflict('Idempotency key was already used for another payment');
    return created(stored);
  });
