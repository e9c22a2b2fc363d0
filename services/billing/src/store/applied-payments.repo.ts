import type { Queryable } from '@sb/runtime';

/** What an earlier handling of a paid payment recorded (its replay repeats the same calls). */
interface AppliedPayment {
  subscription_id: string;
  withdraw_payment_id: string | null;
  unapplied_reason: string | null;
  withdraw_checkout: boolean;
  /** The period it paid for, once applied (null: not applied, or applied by an earlier version). */
  period_start: number | null;
  period_end: number | null;
}

/** Each paid payment handled once: the row is written in the same transaction as what the payment moved. */
export class AppliedPaymentsRepo {
  constructor(private readonly schema = 'billing') {}

  /** True when this call recorded the payment first; false when it was handled before. */
  async claim(q: Queryable, paymentId: string, subscriptionId: string, now: number): Promise<boolean> {
    const { rowCount } = await q.query(
      `INSERT INTO ${this.schema}.applied_payments (payment_id, subscription_id, applied_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
      [paymentId, subscriptionId, now],
    );
    return rowCount === 1;
  }

  async get(q: Queryable, paymentId: string): Promise<AppliedPayment | undefined> {
    const { rows } = await q.query<AppliedPayment>(
      `SELECT withdraw_payment_id, subscription_id, unapplied_reason, withdraw_checkout, period_start::float8 AS period_start, period_end::float8 AS period_end
       FROM ${this.schema}.applied_payments WHERE payment_id = $1`,
      [paymentId],
    );
    return rows[0];
  }

  async setUnapplied(q: Queryable, paymentId: string, reason: string): Promise<void> {
    await q.query(`UPDATE ${this.schema}.applied_payments SET unapplied_reason = $2 WHERE payment_id = $1`, [paymentId, reason]);
  }

  /** The payment activated the contact's pending checkout `subscriptionId`, whose own checkout payment is withdrawn. */
  async setActivatedCheckout(q: Queryable, paymentId: string, subscriptionId: string): Promise<void> {
    await q.query(`UPDATE ${this.schema}.applied_payments SET subscription_id = $2, withdraw_checkout = true WHERE payment_id = $1`, [
      paymentId,
      subscriptionId,
    ]);
  }

  /** The period the payment paid for: the subscription's period once it was applied. */
  async setPeriod(q: Queryable, paymentId: string, period: { start: number; end: number }): Promise<void> {
    await q.query(`UPDATE ${this.schema}.applied_payments SET period_start = $2, period_end = $3 WHERE payment_id = $1`, [paymentId, period.start, period.end]);
  }

  async setWithdraw(q: Queryable, paymentId: string, withdrawPaymentId: string): Promise<void> {
    await q.query(`UPDATE ${this.schema}.applied_payments SET withdraw_payment_id = $2 WHERE payment_id = $1`, [paymentId, withdrawPaymentId]);
  }
}
