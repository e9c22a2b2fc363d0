import type { NWCErrorCode } from '@sb/contracts';
import type { Queryable } from '@sb/runtime';

/** A pay_invoice request sent (or being sent) to a wallet for a payment. */
export interface AttemptRow {
  id: string;
  payment_id: string;
  connection_id: string;
  wallet_pubkey: string;
  outcome: 'paid' | 'failed' | 'abandoned' | null;
  error_code: NWCErrorCode | null;
  error_message: string | null;
  /** Paid, but the payments service has not confirmed this preimage yet. */
  unconfirmed_preimage: string | null;
  /** Its lease ran out (database time) while it was still in flight: the replica charging it is gone. */
  lapsed: boolean;
  /** What it charged (null on attempts of earlier versions). */
  amount_sats: number | null;
  purpose: 'checkout' | 'renewal' | null;
}

/** The columns of an AttemptRow, of the table named `a` when `p` is 'a.'. */
const cols = (p = '') =>
  `${p}id, ${p}payment_id, ${p}connection_id, ${p}wallet_pubkey, ${p}outcome, ${p}error_code, ${p}error_message, ${p}unconfirmed_preimage, ` +
  `${p}amount_sats::int AS amount_sats, ${p}purpose, (${p}outcome IS NULL AND ${p}lease_until < now()) AS lapsed`;
const COLS = cols();

export class AttemptsRepo {
  constructor(private readonly schema = 'nwc') {}

  private get t() {
    return `${this.schema}.charge_attempts`;
  }

  /**
   * Claims the payment for a new attempt: `mine` when the row was inserted, else the attempt already in
   * flight (undefined when it ended between the two statements: claim again), or `paid`: an attempt of
   * the payment was paid, its wallet must not be asked again (looked up once the claim is in: an attempt
   * that was in flight ended before it, so its outcome is seen). An in-flight attempt past its lease is
   * abandoned first.
   */
  async claim(
    q: Queryable,
    a: {
      id: string;
      payment_id: string;
      connection_id: string;
      wallet_pubkey: string;
      amount_sats: number;
      purpose: 'checkout' | 'renewal';
      request_key: string | null;
    },
    leaseMs: number,
  ): Promise<{ mine: true } | { mine: false; current: AttemptRow | undefined } | { mine: false; paid: AttemptRow }> {
    await q.query(`UPDATE ${this.t} SET outcome = 'abandoned', finished_at = now() WHERE payment_id = $1 AND outcome IS NULL AND lease_until < now()`, [
      a.payment_id,
    ]);
    const inserted = await q.query(
      `INSERT INTO ${this.t} (id, payment_id, connection_id, wallet_pubkey, lease_until, amount_sats, purpose, request_key)
       VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond', $6, $7, $8)
       ON CONFLICT (payment_id) WHERE outcome IS NULL DO NOTHING RETURNING id`,
      [a.id, a.payment_id, a.connection_id, a.wallet_pubkey, leaseMs, a.amount_sats, a.purpose, a.request_key],
    );
    if (inserted.rowCount) {
      const paid = await q.query<AttemptRow>(`SELECT ${COLS} FROM ${this.t} WHERE payment_id = $1 AND outcome = 'paid' ORDER BY started_at DESC LIMIT 1`, [
        a.payment_id,
      ]);
      if (!paid.rows[0]) return { mine: true };
      await q.query(`DELETE FROM ${this.t} WHERE id = $1`, [a.id]);
      return { mine: false, paid: paid.rows[0] };
    }
    const { rows } = await q.query<AttemptRow>(`SELECT ${COLS} FROM ${this.t} WHERE payment_id = $1 AND outcome IS NULL`, [a.payment_id]);
    return { mine: false, current: rows[0] };
  }

  /**
   * The refusal the same wallet (`walletPubkey`) answered to an earlier run of the same request
   * (`requestKey`) for the payment, if any. Another wallet sent with a key the gateway freed is asked.
   * `recent`: it ended within `windowS` (database time), while its wallet may still pay after it.
   */
  async refusalOf(
    q: Queryable,
    paymentId: string,
    requestKey: string,
    walletPubkey: string,
    windowS: number,
  ): Promise<(AttemptRow & { recent: boolean }) | undefined> {
    const { rows } = await q.query<AttemptRow & { recent: boolean }>(
      `SELECT ${COLS}, finished_at > now() - $4 * interval '1 second' AS recent FROM ${this.t}
        WHERE payment_id = $1 AND request_key = $2 AND wallet_pubkey = $3 AND outcome = 'failed'
       ORDER BY started_at DESC LIMIT 1`,
      [paymentId, requestKey, walletPubkey, windowS],
    );
    return rows[0];
  }

  async get(q: Queryable, id: string): Promise<AttemptRow | undefined> {
    const { rows } = await q.query<AttemptRow>(`SELECT ${COLS} FROM ${this.t} WHERE id = $1`, [id]);
    return rows[0];
  }

  /**
   * Records how the attempt ended, once: false when it had already ended (the outcome of an attempt is
   * counted and announced by whoever records it). An attempt abandoned for its lease may still end as
   * what its wallet answered.
   */
  async finish(
    q: Queryable,
    id: string,
    outcome: 'paid' | 'failed' | 'abandoned',
    o: { error?: { code: NWCErrorCode; message: string }; unconfirmedPreimage?: string } = {},
  ): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.t} SET outcome = $2, error_code = $3, error_message = $4, unconfirmed_preimage = $5, finished_at = now()
       WHERE id = $1 AND (outcome IS NULL OR (outcome = 'abandoned' AND $2 <> 'abandoned'))`,
      [id, outcome, o.error?.code ?? null, o.error?.message ?? null, o.unconfirmedPreimage ?? null],
    );
    return (rowCount ?? 0) > 0;
  }

  /** A paid attempt of another payment of the subscription whose preimage the payments service has not taken yet. */
  async unconfirmedOfSubscription(q: Queryable, subscriptionId: string, otherThanPaymentId: string): Promise<AttemptRow | undefined> {
    const { rows } = await q.query<AttemptRow>(
      `SELECT ${cols('a.')} FROM ${this.t} a JOIN ${this.schema}.connections c ON c.id = a.connection_id
       WHERE c.subscription_id = $1 AND a.unconfirmed_preimage IS NOT NULL AND a.payment_id <> $2 ORDER BY a.finished_at LIMIT 1`,
      [subscriptionId, otherThanPaymentId],
    );
    return rows[0];
  }

  /** Paid attempts whose preimage still waits for the payments service, oldest first. */
  async unconfirmed(q: Queryable, limit: number): Promise<AttemptRow[]> {
    const { rows } = await q.query<AttemptRow>(`SELECT ${COLS} FROM ${this.t} WHERE unconfirmed_preimage IS NOT NULL ORDER BY finished_at LIMIT $1`, [limit]);
    return rows;
  }

  /** The payments service took the preimage (or answered for the payment otherwise): nothing left to confirm. */
  async confirmed(q: Queryable, id: string): Promise<void> {
    await q.query(`UPDATE ${this.t} SET unconfirmed_preimage = NULL WHERE id = $1`, [id]);
  }

  /**
   * The payments service refused the preimage: the wallet did not pay, the attempt failed. True for the
   * one caller that ended it so (the sweeper and a charge may both have tried): it counts and announces it.
   */
  async refuted(q: Queryable, id: string, error: { code: NWCErrorCode; message: string }): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.t} SET outcome = 'failed', error_code = $2, error_message = $3, unconfirmed_preimage = NULL WHERE id = $1 AND unconfirmed_preimage IS NOT NULL`,
      [id, error.code, error.message],
    );
    return (rowCount ?? 0) > 0;
  }

  /**
   * Failed attempts finished less than `seconds` ago with one of `codes` (their wallet may have paid
   * after the charge asked whether it was) whose failure still counts on an active connection, with the
   * connection's wallet and subscription (the payment is looked up with them). Each is due again once as
   * old as it was at its last look (lookedAtLate): a few looks in the window, soon after the failure
   * most. An attempt ended by `notLate` (a message the wallet's answer proved final) is never due. Newest first: a wallet that pays late does so within moments.
   */
  async recentlyFailed(
    q: Queryable,
    seconds: number,
    codes: readonly NWCErrorCode[],
    limit: number,
    notLate: string,
  ): Promise<(AttemptRow & { wallet_id: string; subscription_id: string })[]> {
    const { rows } = await q.query<AttemptRow & { wallet_id: string; subscription_id: string }>(
      `SELECT ${cols('a.')}, c.wallet_id, c.subscription_id
       FROM ${this.t} a JOIN ${this.schema}.connections c ON c.id = a.connection_id
       WHERE a.outcome = 'failed' AND a.finished_at > now() - $1 * interval '1 second' AND a.error_code = ANY($2)
         AND (a.late_looked_at IS NULL OR now() - a.late_looked_at >= a.late_looked_at - a.finished_at)
         AND a.error_message IS DISTINCT FROM $4
         AND c.is_active AND c.consecutive_failures > 0
       ORDER BY a.finished_at DESC LIMIT $3`,
      [seconds, codes, limit, notLate],
    );
    return rows;
  }

  /** The failed attempt's invoice was looked at and not paid yet. */
  async lookedAtLate(q: Queryable, id: string): Promise<void> {
    await q.query(`UPDATE ${this.t} SET late_looked_at = now() WHERE id = $1`, [id]);
  }

  /**
   * A failed attempt whose invoice turned out paid: it is paid (the wallet is not asked for the payment
   * again), and its connection counts only the failures after it and after its last paid attempt, as
   * if it had succeeded then. False when it is no longer a failure (another replica got there first).
   */
  async paidLate(q: Queryable, id: string): Promise<boolean> {
    const { rows } = await q.query<{ connection_id: string; finished_at: Date }>(
      `UPDATE ${this.t} SET outcome = 'paid' WHERE id = $1 AND outcome = 'failed' RETURNING connection_id, finished_at`,
      [id],
    );
    const a = rows[0];
    if (!a) return false;
    // A failure counted at this moment by a charge must be in the count, not overwritten by it.
    await q.query(`SELECT 1 FROM ${this.schema}.connections WHERE id = $1 FOR UPDATE`, [a.connection_id]);
    await q.query(
      `WITH since AS (SELECT greatest($2::timestamptz, max(finished_at)) AS t FROM ${this.t} WHERE connection_id = $1 AND outcome = 'paid' AND id <> $3),
       later AS (SELECT count(*)::int AS n FROM ${this.t}, since WHERE connection_id = $1 AND outcome = 'failed' AND finished_at > since.t)
       UPDATE ${this.schema}.connections SET consecutive_failures = later.n,
         last_error = CASE WHEN later.n = 0 THEN NULL ELSE last_error END,
         last_error_code = CASE WHEN later.n = 0 THEN NULL ELSE last_error_code END
       FROM later WHERE id = $1 AND is_active`,
      [a.connection_id, a.finished_at, id],
    );
    return true;
  }

  /**
   * Deletes up to `limit` attempts finished more than `days` ago (nothing left to confirm); how many. An
   * attempt whose replica died and whose payment was never charged again would stay in flight for good:
   * a day past its lease it is ended as abandoned first, and deleted with the others later.
   */
  async prune(q: Queryable, days: number, limit: number): Promise<number> {
    await q.query(`UPDATE ${this.t} SET outcome = 'abandoned', finished_at = now() WHERE outcome IS NULL AND lease_until < now() - interval '1 day'`);
    const { rowCount } = await q.query(
      `DELETE FROM ${this.t} WHERE id IN (
         SELECT id FROM ${this.t} WHERE outcome IS NOT NULL AND finished_at < now() - $1 * interval '1 day' AND unconfirmed_preimage IS NULL
         ORDER BY finished_at LIMIT $2)`,
      [days, limit],
    );
    return rowCount ?? 0;
  }
}
