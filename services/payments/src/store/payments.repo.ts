import type { Paginated, PaymentMethod, PaymentPurpose, PaymentStatus } from '@sb/contracts';
import { keyLookup, type Queryable } from '@sb/runtime';
import type { PaymentRecord } from '../domain/payments.js';

const INSERTED = [
  'id',
  'wallet_id',
  'subscription_id',
  'plan_id',
  'plan_name',
  'amount_sats',
  'status',
  'payment_method',
  'purpose',
  'payment_request',
  'payment_hash',
  'provider',
  'provider_ref',
  'expires_at',
  'paid_at',
  'created_at',
  'idempotency_key',
  'onchain_address',
  'onchain_txid',
  'checkout_url',
  'amount_fiat',
  'currency',
  'fiat_rate',
  'cardproc_payment_id',
  'walletproc_order_id',
  'failure_reason',
  'watchonly_wallet_id',
  'derivation_index',
] as const;

// NUMERIC columns come back as strings from the driver; the record holds numbers.
const COLUMNS = [...INSERTED, 'unapplied_reason', 'applied_at', 'replaced_by', 'period_start', 'period_end', 'version']
  .map((c) => (c === 'amount_fiat' || c === 'fiat_rate' ? `${c}::float8 AS ${c}` : c))
  .join(', ');

/** PostgreSQL's unique_violation, with the constraint it hit. */
export const isUniqueViolation = (err: unknown): err is { code: '23505'; constraint?: string } => (err as { code?: string } | null)?.code === '23505';

/** What a provider tells about a payment when it is settled. */
const DETAIL_COLUMNS = ['onchain_txid', 'cardproc_payment_id', 'walletproc_order_id', 'failure_reason'] as const;
export type PaymentDetails = Partial<Pick<PaymentRecord, (typeof DETAIL_COLUMNS)[number]>>;

interface PaymentFilters {
  subscription_id?: string;
  /** Payments of any of these subscriptions (a subscriber's, for the portal). */
  subscription_ids?: string[];
  status?: PaymentStatus;
  payment_method?: PaymentMethod;
  purpose?: PaymentPurpose;
}

/**
 * Persistence of payments. Owner reads are scoped to the wallet, so a foreign id looks exactly like an
 * unknown one; only the public status poll, the dev endpoint and provider callbacks read by id alone.
 */
export class PaymentsRepo {
  private readonly getSql: string;
  private readonly getByIdSql: string;

  constructor(private readonly schema = 'payments') {
    this.getSql = keyLookup(`SELECT ${COLUMNS} FROM ${schema}.payments WHERE id = $1 AND wallet_id = $2`);
    this.getByIdSql = keyLookup(`SELECT ${COLUMNS} FROM ${schema}.payments WHERE id = $1`);
  }

  private get t() {
    return `${this.schema}.payments`;
  }

  /**
   * Inserts unless the wallet already used the idempotency key; undefined then. `devPreimage`: the
   * preimage of a DEV provider invoice (never of a real one).
   */
  async insert(q: Queryable, p: Omit<PaymentRecord, 'version'>, devPreimage: string | null = null): Promise<PaymentRecord | undefined> {
    const { rows } = await q.query<PaymentRecord>(
      `INSERT INTO ${this.t} (${INSERTED.join(', ')}, dev_preimage) VALUES (${INSERTED.map((_, i) => `$${i + 1}`).join(', ')}, $${INSERTED.length + 1})
       ON CONFLICT ON CONSTRAINT payments_idempotency DO NOTHING RETURNING ${COLUMNS}`,
      [...INSERTED.map((c) => p[c]), devPreimage],
    );
    return rows[0];
  }

  /**
   * Inserts many in one statement; rows whose (wallet, idempotency key) is already used are skipped, so
   * only the payments this call stored come back (a racing caller's are read with `byIdempotencyKeys`).
   */
  async insertMany(q: Queryable, rows: { payment: Omit<PaymentRecord, 'version'>; devPreimage: string | null }[]): Promise<PaymentRecord[]> {
    if (!rows.length) return [];
    const width = INSERTED.length + 1;
    const values = rows.map((_, r) => `(${Array.from({ length: width }, (_, i) => `$${r * width + i + 1}`).join(', ')})`);
    const { rows: stored } = await q.query<PaymentRecord>(
      `INSERT INTO ${this.t} (${INSERTED.join(', ')}, dev_preimage) VALUES ${values.join(', ')}
       ON CONFLICT ON CONSTRAINT payments_idempotency DO NOTHING RETURNING ${COLUMNS}`,
      rows.flatMap((r) => [...INSERTED.map((c) => r.payment[c]), r.devPreimage]),
    );
    return stored;
  }

  /** The payments already made under any of these (wallet, idempotency key) pairs, in one statement. */
  async byIdempotencyKeys(q: Queryable, keys: { wallet_id: string; idempotency_key: string }[]): Promise<PaymentRecord[]> {
    if (!keys.length) return [];
    // One key (a checkout): the plain lookup, which the planner need not plan as a join.
    if (keys.length === 1) {
      const p = await this.byIdempotencyKey(q, keys[0]!.wallet_id, keys[0]!.idempotency_key);
      return p ? [p] : [];
    }
    const { rows } = await q.query<PaymentRecord>(
      `SELECT ${COLUMNS} FROM ${this.t} WHERE (wallet_id, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
      [keys.map((k) => k.wallet_id), keys.map((k) => k.idempotency_key)],
    );
    return rows;
  }

  /** Which of these payments of the wallets named are paid, in one statement. */
  async paidAmong(q: Queryable, refs: { wallet_id: string; id: string }[]): Promise<Set<string>> {
    if (!refs.length) return new Set();
    const { rows } = await q.query<{ id: string }>(
      `SELECT id FROM ${this.t} WHERE status = 'paid' AND unapplied_reason IS NULL AND (id, wallet_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
      [refs.map((r) => r.id), refs.map((r) => r.wallet_id)],
    );
    return new Set(rows.map((r) => r.id));
  }

  /** The preimage of a DEV provider invoice, by its payment hash (the dev provider's reference, so the unique index finds it). */
  async devInvoice(q: Queryable, paymentHash: string): Promise<{ id: string; dev_preimage: string } | undefined> {
    const { rows } = await q.query<{ id: string; dev_preimage: string }>(
      `SELECT id, dev_preimage FROM ${this.t} WHERE provider = 'dev' AND provider_ref = $1 AND payment_hash = $1 AND dev_preimage IS NOT NULL`,
      [paymentHash],
    );
    return rows[0];
  }

  async byIdempotencyKey(q: Queryable, walletId: string, key: string): Promise<PaymentRecord | undefined> {
    const { rows } = await q.query<PaymentRecord>(`SELECT ${COLUMNS} FROM ${this.t} WHERE wallet_id = $1 AND idempotency_key = $2`, [walletId, key]);
    return rows[0];
  }

  async get(q: Queryable, walletId: string, id: string): Promise<PaymentRecord | undefined> {
    const { rows } = await q.query<PaymentRecord>(this.getSql, [id, walletId]);
    return rows[0];
  }

  /** Billing could not apply this paid payment to any subscription (idempotent). False: no such payment. */
  async markUnapplied(q: Queryable, walletId: string, id: string, reason: string): Promise<boolean> {
    const { rowCount } = await q.query(`UPDATE ${this.t} SET unapplied_reason = $3 WHERE id = $1 AND wallet_id = $2`, [id, walletId, reason]);
    return rowCount === 1;
  }

  /**
   * Billing applied this paid payment to a subscription, for `period` when it says (idempotent: the first
   * time stays). False: no such paid payment.
   */
  async markApplied(q: Queryable, walletId: string, id: string, at: number, period?: { start: number; end: number }): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.t} SET applied_at = COALESCE(applied_at, $3), period_start = COALESCE(period_start, $4), period_end = COALESCE(period_end, $5)
       WHERE id = $1 AND wallet_id = $2 AND status = 'paid'`,
      [id, walletId, at, period?.start ?? null, period?.end ?? null],
    );
    return rowCount === 1;
  }

  /** By id alone: public status poll, dev pay, confirmation. */
  async getById(q: Queryable, id: string): Promise<PaymentRecord | undefined> {
    const { rows } = await q.query<PaymentRecord>(this.getByIdSql, [id]);
    return rows[0];
  }

  /**
   * Records a provider callback's event id; false when it was already recorded (a redelivery). Run in the
   * transaction that applies the event, so an event is recorded exactly when its effect is.
   */
  async recordCallback(q: Queryable, provider: string, eventId: string, paymentId: string | null, receivedAt: number): Promise<boolean> {
    const { rowCount } = await q.query(
      `INSERT INTO ${this.schema}.processed_callbacks (provider, event_id, payment_id, received_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (provider, event_id) DO NOTHING`,
      [provider, eventId, paymentId, receivedAt],
    );
    return rowCount === 1;
  }

  async callbackRecorded(q: Queryable, provider: string, eventId: string): Promise<boolean> {
    const { rowCount } = await q.query(`SELECT 1 FROM ${this.schema}.processed_callbacks WHERE provider = $1 AND event_id = $2`, [provider, eventId]);
    return rowCount === 1;
  }

  async byProviderRef(q: Queryable, provider: string, ref: string): Promise<PaymentRecord | undefined> {
    const { rows } = await q.query<PaymentRecord>(`SELECT ${COLUMNS} FROM ${this.t} WHERE provider = $1 AND provider_ref = $2`, [provider, ref]);
    return rows[0];
  }

  /**
   * Compare-and-set of the status: moves the payment to `to` only if it is still in one of `from`. Under
   * concurrent callers exactly one wins (PostgreSQL re-checks the condition after the row lock); the
   * others get undefined.
   */
  async transition(
    q: Queryable,
    id: string,
    from: PaymentStatus[],
    to: PaymentStatus,
    paidAt: number | null = null,
    details: PaymentDetails = {},
  ): Promise<PaymentRecord | undefined> {
    const keys = DETAIL_COLUMNS.filter((k) => details[k] !== undefined);
    const { rows } = await q.query<PaymentRecord>(
      `UPDATE ${this.t} SET status = $3, paid_at = COALESCE($4, paid_at), version = version + 1${keys.map((k, i) => `, ${k} = $${i + 5}`).join('')}
       WHERE id = $1 AND status = ANY($2::text[]) RETURNING ${COLUMNS}`,
      [id, from, to, paidAt, ...keys.map((k) => details[k])],
    );
    return rows[0];
  }

  /** Billing must hear that this payment ended early: told now, and again from `at` on until it answered. */
  async setEndNotice(q: Queryable, id: string, at: number): Promise<void> {
    await q.query(`UPDATE ${this.t} SET end_notice_at = $2 WHERE id = $1`, [id, at]);
  }

  /**
   * Claims up to `limit` payments whose end billing has not confirmed hearing of by `now`, each put off
   * by `retryAfter` seconds (SKIP LOCKED: replicas never claim the same one at once).
   */
  async claimEndNotices(q: Queryable, now: number, retryAfter: number, limit: number): Promise<PaymentRecord[]> {
    const { rows } = await q.query<PaymentRecord>(
      `UPDATE ${this.t} SET end_notice_at = $1::bigint + $2::bigint
       WHERE id IN (SELECT id FROM ${this.t} WHERE end_notice_at <= $1 ORDER BY end_notice_at LIMIT $3 FOR UPDATE SKIP LOCKED)
       RETURNING ${COLUMNS}`,
      [now, retryAfter, limit],
    );
    return rows;
  }

  /** Notes that the provider was seen to be paid another amount for `id`; true only the first time. */
  async markMismatchSeen(q: Queryable, id: string, at: number): Promise<boolean> {
    const r = await q.query(`UPDATE ${this.t} SET mismatch_seen_at = $2 WHERE id = $1 AND mismatch_seen_at IS NULL`, [id, at]);
    return (r.rowCount ?? 0) > 0;
  }

  async clearEndNotice(q: Queryable, id: string): Promise<void> {
    await q.query(`UPDATE ${this.t} SET end_notice_at = NULL WHERE id = $1`, [id]);
  }

  /** Every payment of the subscription in one of `from` moves to `to`; returns the moved payments. */
  async transitionForSubscription(
    q: Queryable,
    walletId: string,
    subscriptionId: string,
    from: PaymentStatus[],
    to: PaymentStatus,
    onlyId?: string,
    replacedBy?: string,
  ): Promise<PaymentRecord[]> {
    const { rows } = await q.query<PaymentRecord>(
      `UPDATE ${this.t} SET status = $4, version = version + 1, replaced_by = COALESCE($6, replaced_by)
       WHERE wallet_id = $1 AND subscription_id = $2 AND status = ANY($3::text[]) AND ($5::text IS NULL OR id = $5) RETURNING ${COLUMNS}`,
      [walletId, subscriptionId, from, to, onlyId ?? null, replacedBy ?? null],
    );
    return rows;
  }

  /** An expired payment of the subscription names the payment that started it instead (once: the first says it). */
  async markReplaced(q: Queryable, walletId: string, subscriptionId: string, id: string, replacedBy: string): Promise<void> {
    await q.query(
      `UPDATE ${this.t} SET replaced_by = $4, version = version + 1
       WHERE wallet_id = $1 AND subscription_id = $2 AND id = $3 AND status = 'expired' AND purpose = 'checkout' AND replaced_by IS NULL`,
      [walletId, subscriptionId, id, replacedBy],
    );
  }

  /**
   * Expires up to `limit` payments in `from` whose `expires_at` has passed. Rows are claimed with SKIP
   * LOCKED so replicas sweeping at once never wait on each other or touch a row twice.
   */
  async expireDue(q: Queryable, now: number, from: PaymentStatus[], to: PaymentStatus, limit: number): Promise<string[]> {
    const { rows } = await q.query<{ id: string }>(
      `UPDATE ${this.t} SET status = $3, version = version + 1
       WHERE id IN (
         SELECT id FROM ${this.t} WHERE status = ANY($2::text[]) AND expires_at <= $1
         ORDER BY expires_at LIMIT $4 FOR UPDATE SKIP LOCKED)
       AND status = ANY($2::text[])
       RETURNING id`,
      [now, from, to, limit],
    );
    return rows.map((r) => r.id);
  }

  /**
   * Claims up to `limit` open payments of `provider` to ask the provider about: pending ones, and ones
   * that expired less than `lateWindow` seconds ago (a payment can arrive late and its callback be lost).
   * Each is stamped so no replica asks again before `recheckAfter` seconds; least recently asked first.
   */
  async claimForCheck(
    q: Queryable,
    provider: string,
    method: PaymentMethod,
    now: number,
    recheckAfter: number,
    lateWindow: number,
    limit: number,
  ): Promise<PaymentRecord[]> {
    const { rows } = await q.query<PaymentRecord>(
      `UPDATE ${this.t} SET last_checked_at = $2::bigint
       WHERE id IN (
         SELECT id FROM ${this.t}
         WHERE provider = $1 AND payment_method = $6 AND provider_ref IS NOT NULL
           AND (status = 'pending' OR (status = 'expired' AND expires_at > $2::bigint - $4::bigint))
           AND (last_checked_at IS NULL OR last_checked_at <= $2::bigint - $3::bigint)
         ORDER BY last_checked_at NULLS FIRST, created_at
         LIMIT $5 FOR UPDATE SKIP LOCKED)
       RETURNING ${COLUMNS}`,
      [provider, now, recheckAfter, lateWindow, limit, method],
    );
    return rows;
  }

  /** Stamps one payment as asked about now, unless it was asked less than `recheckAfter` seconds ago (then false). */
  async stampCheck(q: Queryable, id: string, now: number, recheckAfter: number): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.t} SET last_checked_at = $2::bigint WHERE id = $1 AND (last_checked_at IS NULL OR last_checked_at <= $2::bigint - $3::bigint)`,
      [id, now, recheckAfter],
    );
    return rowCount === 1;
  }

  /** Newest first, ties broken by id (ids sort by creation time). */
  async list(q: Queryable, walletId: string, f: PaymentFilters, limit: number, offset: number): Promise<Paginated<PaymentRecord>> {
    const where = ['wallet_id = $1'];
    const values: unknown[] = [walletId];
    for (const key of ['subscription_id', 'status', 'payment_method', 'purpose'] as const) {
      const v = f[key];
      if (v !== undefined) {
        values.push(v);
        where.push(`${key} = $${values.length}`);
      }
    }
    if (f.subscription_ids) {
      values.push(f.subscription_ids);
      where.push(`subscription_id = ANY($${values.length})`);
    }
    const cond = where.join(' AND ');
    const [items, count] = await Promise.all([
      q.query<PaymentRecord>(
        `SELECT ${COLUMNS} FROM ${this.t} WHERE ${cond} ORDER BY created_at DESC, id DESC LIMIT $${values.length + 1} OFFSET $${values.length + 2}`,
        [...values, limit, offset],
      ),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.t} WHERE ${cond}`, values),
    ]);
    return { items: items.rows, total: count.rows[0]?.n ?? 0, limit, offset };
  }
}
