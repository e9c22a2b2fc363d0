import { callMessage, enqueueEvent, unixSeconds, type Queryable } from '@sb/runtime';
import { messages, PaymentEventData } from '@sb/contracts';
import { SCHEMA, type Deps } from './deps.js';
import type { PaymentDetails } from './store/payments.repo.js';
import { paymentReceivedData, statesAllowing, type PaymentRecord } from './domain/payments.js';
import type { CallbackOutcome } from './providers/callback.js';
import type { ProviderStatus } from './providers/rail.js';

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
  const paidMs = d.clock.nowMs();
  const paid = await d.payments.transition(tx, paymentId, from, to, Math.floor(paidMs / 1000), details);
  if (!paid) return { payment: await d.payments.getById(tx, paymentId), confirmed: false };
  // The event's id carries the instant of the payment, to the millisecond: billing orders the payment by
  // it against a pause or cancel of the same second.
  await enqueueEvent(tx, SCHEMA, { nowMs: () => paidMs }, paid.wallet_id, 'payment.received', PaymentEventData.parse(paymentReceivedData(paid)));
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
  await owesEndNotice(d, tx, failed);
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

/**
 * A renewal payment the provider ended before its time (expired or failed there) leaves the subscription
 * nothing to pay until billing replaces it, and only billing decides that: it must hear of it. Recorded
 * in the transaction of the change, so a crash before billing answered only delays it (the sweeper tells
 * billing again); a checkout's end is the subscriber's to retry on the checkout page, as before.
 */
async function owesEndNotice(d: Pick<Deps, 'clock' | 'payments'>, tx: Queryable, p: PaymentRecord): Promise<void> {
  if (p.purpose === 'renewal') await d.payments.setEndNotice(tx, p.id, unixSeconds(d.clock));
}

/**
 * Tells billing that `p` ended early, then forgets the notice; if billing cannot be reached the notice
 * stays and the sweeper tries again. Billing's answer is idempotent, so telling it twice is harmless.
 */
export async function tellBillingOfEnd(
  d: Pick<Deps, 'db' | 'bus' | 'payments'>,
  p: Pick<PaymentRecord, 'id' | 'wallet_id' | 'subscription_id'>,
): Promise<void> {
  await callMessage(d.bus, messages.renewalEnded, { wallet_id: p.wallet_id, subscription_id: p.subscription_id, payment_id: p.id });
  await d.payments.clearEndNotice(d.db, p.id);
}

/**
 * Right after the change committed, so the replacement comes on billing's next pass. Not waited for: a
 * slow billing would hold the provider's callback or the payer's poll for the bus timeout (the gateway
 * answers 503, and the provider redelivers), while the stored notice already makes the sweeper tell it again.
 */
export function announceEnd(d: Pick<Deps, 'db' | 'bus' | 'payments' | 'log'>, p: PaymentRecord, change: string | null): void {
  if ((change !== 'expired' && change !== 'failed') || p.purpose !== 'renewal') return;
  void tellBillingOfEnd(d, p).catch((err) => d.log.warn({ err, payment_id: p.id }, 'billing not told of the early end yet; the sweeper tells it again'));
}

/** Applies what the provider says about a payment: confirms it when paid, fails it when it never will be. */
export async function settleFromProvider(
  d: Pick<Deps, 'db' | 'clock' | 'payments' | 'log' | 'bus'>,
  p: PaymentRecord,
  status: ProviderStatus,
  via: string,
): Promise<{ payment: PaymentRecord; changed: 'paid' | 'failed' | null }> {
  // Once per payment: every status poll and sweep would otherwise say it again for as long as it is open.
  if (status.mismatch && (await d.payments.markMismatchSeen(d.db, p.id, unixSeconds(d.clock))))
    d.log.warn({ payment_id: p.id, provider: p.provider, via, reason: status.mismatch }, 'provider says paid for another amount; not marked paid');
  if (status.paid) {
    // The store skips undefined details, so each provider passes only what it knows.
    const r = await confirmPayment(d, p.id, { onchain_txid: status.onchain_txid, cardproc_payment_id: status.cardproc_payment_id });
    if (r.confirmed) d.log.info({ payment_id: p.id, provider: p.provider, via }, 'payment confirmed');
    return { payment: r.payment ?? p, changed: r.confirmed ? 'paid' : null };
  }
  if (status.failed) {
    const r = await failPayment(d, p.id, `${p.provider} reports the payment failed`);
    if (r.confirmed) d.log.info({ payment_id: p.id, provider: p.provider, via }, 'payment failed');
    if (r.confirmed) announceEnd(d, p, 'failed');
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
    const expired = await d.payments.transition(tx, p.id, from, to);
    if (expired) await owesEndNotice(d, tx, expired);
    return expired ? 'expired' : null;
  }
  return null;
}
