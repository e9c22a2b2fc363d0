import { ID_PREFIXES, messages, type CreatePayment } from '@sb/contracts';
import { conflict, DomainError, messageHandler, newId, unprocessable } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { checkoutOf } from '../domain/checkout.js';
import { toPayment, type PaymentRecord } from '../domain/payments.js';
import { logProviderFailure } from '../providers/lightning.js';

const notConfigured = (method: string) =>
  new DomainError(422, [
    { loc: ['body', 'payment_method'], msg: `${method} payments are not configured on this server`, type: 'provider_not_configured' },
  ]);

/** The same key may only ever name the same payment. */
function sameRequest(p: PaymentRecord, r: CreatePayment): boolean {
  return p.subscription_id === r.subscription_id && p.amount_sats === r.amount_sats && p.payment_method === r.payment_method;
}

async function created(p: PaymentRecord) {
  return { payment: toPayment(p), checkout: await checkoutOf(p) };
}

/**
 * Opens a payment: an invoice at the provider, stored `pending`. Idempotent on (wallet, idempotency key):
 * a retry answers the payment the first call made. Two racing first calls may both reach the provider;
 * only one payment is stored and both answer it (the other invoice simply expires unpaid).
 */
export const createPaymentHandler = (d: Deps) =>
  messageHandler(messages.createPayment, async (req) => {
    if (req.payment_method !== 'lightning' || !d.lightning) throw notConfigured(req.payment_method);

    const existing = await d.payments.byIdempotencyKey(d.db, req.wallet_id, req.idempotency_key);
    if (existing) {
      if (!sameRequest(existing, req)) throw conflict('Idempotency key was already used for another payment');
      return created(existing);
    }

    const nowMs = d.clock.nowMs();
    const now = Math.floor(nowMs / 1000);
    if (req.expires_at - now < 1) throw unprocessable(['body', 'expires_at'], 'expires_at must be in the future');
    const expirySeconds = Math.min(req.expires_at - now, d.invoiceMaxExpiryS);

    const provider = d.lightning;
    const invoice = await logProviderFailure(d.log, { subscription_id: req.subscription_id, provider: provider.name }, () =>
      provider.createInvoice({
        amount_sats: req.amount_sats,
        memo: req.description,
        expiry_seconds: expirySeconds,
        ...(d.webhookUrl ? { webhook_url: d.webhookUrl } : {}),
      }),
    );
    const record: Omit<PaymentRecord, 'version'> = {
      id: newId(ID_PREFIXES.payment, nowMs),
      wallet_id: req.wallet_id,
      subscription_id: req.subscription_id,
      plan_id: req.plan_id,
      plan_name: req.plan_name,
      amount_sats: req.amount_sats,
      status: 'pending',
      payment_method: 'lightning',
      purpose: req.purpose,
      payment_request: invoice.payment_request,
      payment_hash: invoice.payment_hash,
      provider: provider.name,
      provider_ref: invoice.provider_ref,
      expires_at: Math.min(now + expirySeconds, invoice.expires_at),
      paid_at: null,
      created_at: now,
      idempotency_key: req.idempotency_key,
    };
    const stored = (await d.payments.insert(d.db, record)) ?? (await d.payments.byIdempotencyKey(d.db, req.wallet_id, req.idempotency_key));
    if (!stored) throw new Error('payment vanished after an idempotency conflict');
    if (stored.id !== record.id && !sameRequest(stored, req)) throw conflict('Idempotency key was already used for another payment');
    return created(stored);
  });
