import { enqueueEvent, type Queryable } from '@sb/runtime';
import { PaymentEventData } from '@sb/contracts';
import { SCHEMA, type Deps } from './deps.js';
import type { PaymentDetails } from './store/payments.repo.js';
import { paymentReceivedData, statesAllowing, type PaymentRecord } from './domain/payments.js';
import type { CallbackOutcome } from './providers/callback.js';

interface Confirmation {
  /** The payment after the call; undefined only for an unknown id. */
  payment?: PaymentRecord;
  /** True for the one call that recorded the payment; every later one changes and emits nothing. */
  confirmed: boolean;
}

/**
 * The one way a payment becomes paid, whoever says so (provider callback, status poll, sweeper, dev
 * endpoint). In one transaction: compare-and-set pending|expired -> paid with `paid_at` = now, and the
 * `payment.received` event in the outbox. Whatever the number of confirmations, the payment is recorded
 * and announced exactly once; a caller may answer its provider only after this resolves.
 */
export async function confirmPayment(d: Pick<Deps, 'db' | 'clock' | 'payments'>, paymentId: string, details: PaymentDetails = {}): Promise<Confirmation> {
  return d.db.tx((tx) => confirmPaymentIn(d, tx, paymentId, details));
}

/** confirmPayment inside the caller's transaction, so a callback's dedupe record commits with the payment or not at all. */
async function confirmPaymentIn(d: Pick<Deps, 'clock' | 'payments'>, tx: Queryable, paymentId: string, details: PaymentDetails = {}): Promise<Confirmation> {
  const { from, to } = statesAllowing('confirm');
  const paidAt = Math.floor(d.clock.nowMs() / 1000);
  const paid = await d.payments.transition(tx, paymentId, from, to, paidAt, details);
  if (!paid) return { payment: await d.payments.getById(tx, paymentId), confirmed: false };
  await enqueueEvent(tx, SCHEMA, d.clock, paid.wallet_id, 'payment.received', PaymentEventData.parse(paymentReceivedData(paid)));
  return { payment: paid, confirmed: true };
}

/**
 * The provider says the payment will never arrive (declined card, denied order): pending -> failed with
 * the reason, and `payment.failed` in the outbox, once.
 */
async function failPayment(d: Pick<Deps, 'db' | 'clock' | 'payments'>, paymentId: string, reason: string): Promise<Confirmation> {
  return d.db.tx((tx) => failPaymentIn(d, tx, paymentId, reason));
}

/** failPayment inside the caller's transaction (see confirmPaymentIn). */
async function failPaymentIn(d: Pick<Deps, 'clock' | 'payments'>, tx: Queryable, paymentId: string, reason: string): Promise<Confirmation> {
  const { from, to } = statesAllowing('fail');
  const failed = await d.payments.transition(tx, paymentId, from, to, null, { failure_reason: reason });
  if (!failed) return { payment: await d.payments.getById(tx, paymentId), confirmed: false };
  await enqueueEvent(
    tx,
    SCHEMA,
    d.clock,
    failed.wallet_id,
    'payment.failed',
    PaymentEventData.parse({ ...paymentReceivedData(failed), status: 'failed', paid_at: null }),
  );
  return { payment: failed, confirmed: true };
}

/** Applies what the provider says about a payment: confirms it when paid, fails it when it never will be. */
export async function settleFromProvider(
  d: Pick<Deps, 'db' | 'clock' | 'payments' | 'log'>,
  p: PaymentRecord,
  status: { paid: boolean; failed?: boolean; onchain_txid?: string; cardproc_payment_id?: string },
  via: string,
): Promise<{ payment: PaymentRecord; changed: 'paid' | 'failed' | null }> {
  if (status.paid) {
    // The store skips undefined details, so each provider passes only what it knows.
    const r = await confirmPayment(d, p.id, { onchain_txid: status.onchain_txid, cardproc_payment_id: status.cardproc_payment_id });
    if (r.confirmed) d.log.info({ payment_id: p.id, provider: p.provider, via }, 'payment confirmed');
    return { payment: r.payment ?? p, changed: r.confirmed ? 'paid' : null };
  }
  if (status.failed) {
    const r = await failPayment(d, p.id, `${p.provider} reports the payment failed`);
    if (r.confirmed) d.log.info({ payment_id: p.id, provider: p.provider, via }, 'payment failed');
    return { payment: r.payment ?? p, changed: r.confirmed ? 'failed' : null };
  }
  return { payment: p, changed: null };
}

/** Applies what a callback says inside the transaction that records it; the change made, if any. */
export async function applyOutcome(
  d: Pick<Deps, 'clock' | 'payments'>,
  tx: Queryable,
  p: PaymentRecord,
  o: CallbackOutcome,
): Promise<'paid' | 'failed' | 'expired' | null> {
  if ('paid' in o) return (await confirmPaymentIn(d, tx, p.id, o.details)).confirmed ? 'paid' : null;
  if ('failed' in o) return (await failPaymentIn(d, tx, p.id, o.failed)).confirmed ? 'failed' : null;
  if ('expired' in o) {
    const { from, to } = statesAllowing('expire');
    return (await d.payments.transition(tx, p.id, from, to)) ? 'expired' : null;
  }
  return null;
}
