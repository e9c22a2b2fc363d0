import { PaymentEventData, messages, type EventEnvelope } from '@sb/contracts';
import { callMessage, unixSeconds } from '@sb/runtime';
import { SCHEMA, type Deps } from './deps.js';
import { applyTransition } from './transitions.js';

/**
 * Applies each paid payment to its subscription exactly once: the payment id is recorded in
 * `applied_payments` in the same transaction as the move, and the message is acknowledged only after
 * commit, so a crash replays it and the replay changes nothing.
 */
export async function applyPaymentEvent(d: Deps, envelope: EventEnvelope): Promise<'applied' | 'duplicate' | 'ignored'> {
  const p = PaymentEventData.parse(envelope.data);
  if (p.status !== 'paid') return 'ignored';
  const outcome = await d.db.tx(async (tx): Promise<{ result: 'applied' | 'duplicate' | 'ignored'; withdraw?: string | null }> => {
    const now = unixSeconds(d.clock);
    const fresh = await tx.query(`INSERT INTO ${SCHEMA}.applied_payments (payment_id, subscription_id, applied_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [
      p.payment_id, p.subscription_id, now,
    ]);
    if (fresh.rowCount !== 1) {
      const prior = await tx.query<{ withdraw_payment_id: string | null }>(`SELECT withdraw_payment_id FROM ${SCHEMA}.applied_payments WHERE payment_id = $1`, [p.payment_id]);
      return { result: 'duplicate', withdraw: prior.rows[0]?.withdraw_payment_id };
    }
    const sub = await d.subscriptions.get(tx, envelope.wallet_id, p.subscription_id, true);
    if (!sub) return { result: 'ignored' };
    const paidAt = p.paid_at ?? now;
    // Activation and renewal confirm the payment to the subscriber when they opted into confirmations.
    const extra = { payment_id: p.payment_id, amount_sats: p.amount_sats, notify_subscriber: sub.receive_confirmations };
    const move =
      p.purpose === 'checkout' && (sub.status === 'pending' || sub.status === 'expired')
        ? ({ type: 'first_payment', paid_at: paidAt } as const)
        : p.purpose === 'renewal' && ['active', 'past_due', 'payment_failed', 'pending'].includes(sub.status)
          ? ({ type: 'renewal_payment', paid_at: paidAt } as const)
          : undefined;
    if (!move) {
      d.log.warn({ payment_id: p.payment_id, subscription_id: sub.id, status: sub.status }, 'payment recorded but not applicable to this subscription');
      return { result: 'ignored' };
    }
    // A renewal renews the period it was issued for: the open invoice, or an expired one it replaced
    // (paid late). One for a period already renewed must not move the subscription again.
    const current = sub.renewal_payment_id === p.payment_id || (await d.subscriptions.renewalPeriodOf(tx, p.payment_id)) === sub.current_period_end;
    if (move.type === 'renewal_payment' && sub.status !== 'pending' && sub.status !== 'payment_failed' && !current) {
      d.log.warn({ payment_id: p.payment_id, subscription_id: sub.id }, 'renewal payment is not for the current period; recorded only');
      return { result: 'ignored' };
    }
    await applyTransition(d, tx, sub, move, now, { renewal_payment_id: null, renewal_expires_at: null }, extra);
    // The open replacement of a renewal paid late through an older invoice must not be paid a second time.
    const withdraw = move.type === 'renewal_payment' && sub.renewal_payment_id !== null && sub.renewal_payment_id !== p.payment_id ? sub.renewal_payment_id : null;
    if (withdraw) await tx.query(`UPDATE ${SCHEMA}.applied_payments SET withdraw_payment_id = $2 WHERE payment_id = $1`, [p.payment_id, withdraw]);
    return { result: 'applied', withdraw };
  });
  // Outside the transaction (it is another service); a failure throws, the event is redelivered, and the
  // duplicate path above finds the withdrawal again, so it happens at least once (it is idempotent).
  if (outcome.withdraw) {
    await callMessage(d.bus, messages.expireOpenPayments, { wallet_id: envelope.wallet_id, subscription_id: p.subscription_id, payment_id: outcome.withdraw });
  }
  return outcome.result;
}
