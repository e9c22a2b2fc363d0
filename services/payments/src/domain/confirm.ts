import { enqueueEvent } from '@sb/runtime';
import { PaymentEventData } from '@sb/contracts';
import { SCHEMA, type Deps } from '../deps.js';
import { paymentReceivedData, statesAllowing, type PaymentRecord } from './payments.js';

export interface Confirmation {
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
export async function confirmPayment(d: Pick<Deps, 'db' | 'clock' | 'payments'>, paymentId: string): Promise<Confirmation> {
  const { from, to } = statesAllowing('confirm');
  return d.db.tx(async (tx) => {
    const paidAt = Math.floor(d.clock.nowMs() / 1000);
    const paid = await d.payments.transition(tx, paymentId, from, to, paidAt);
    if (!paid) return { payment: await d.payments.getById(tx, paymentId), confirmed: false };
    await enqueueEvent(tx, SCHEMA, d.clock, paid.wallet_id, 'payment.received', PaymentEventData.parse(paymentReceivedData(paid)));
    return { payment: paid, confirmed: true };
  });
}
