import type { Paginated, PaymentMethod, Subscription, SubscriptionStatus } from '@sb/contracts';
import { keyLookup, type Queryable } from '@sb/runtime';
import { hasAccess, LIVE, type SubState, whoCancelled } from '../domain/lifecycle.js';
import { nextDueAt, type SchedulePolicy } from '../domain/schedule.js';

export interface SubRow extends SubState {
  id: string;
  wallet_id: string;
  plan_id: string;
  subscriber_id: string;
  payment_method: PaymentMethod;
  amount_sats: number;
  receive_confirmations: boolean;
  receive_reminders: boolean;
  metadata: Record<string, string>;
  renewal_payment_id: string | null;
  renewal_for: number | null;
  /** When the open renewal payment expires (a new one is issued then, while the grace period lasts). */
  renewal_expires_at: number | null;
  reminded_for: number | null;
  /** When a renewal reminder last went to the subscriber. */
  reminder_notified_at: number | null;
  /** NWC: when the wallet is next asked to pay the open renewal (null: no attempt pending). */
  nwc_next_attempt_at: number | null;
  /** NWC: the wallet is gone (deactivated, disconnected); renewals go out as invoices. */
  nwc_fallback: boolean;
  /** A replica is waiting for the wallet's answer since then. */
  nwc_charging_since: number | null;
  renewal_refused_for: number | null;
  renewal_refused_at: number | null;
  /** The payments service's words for its refusal (said to the owner in the dunning events). */
  renewal_refused_reason: string | null;
  /** Hash of the Idempotency-Key of the checkout that created it (scoped to the caller). */
  checkout_key: string | null;
  created_at: number;
  updated_at: number;
  version: number;
}

const COLS = `id, wallet_id, plan_id, subscriber_id, status, payment_method, amount_sats, interval, grace_period_days,
  period_anchor, anchor_index, period_index, current_period_start, current_period_end, trial_end, cancelled_at, cancel_reason,
  cancelled_by, cancelled_immediately, receive_confirmations, receive_reminders, metadata, renewal_payment_id, renewal_for, renewal_expires_at, reminded_for,
  reminder_notified_at, nwc_next_attempt_at, nwc_fallback, nwc_charging_since, renewal_refused_for, renewal_refused_at, renewal_refused_reason, paused_at, stopped_at_ms, pending_since, dunning_from, checkout_key, created_at, updated_at, version`;

/** The lifecycle fields a transition may change, plus bookkeeping of the scheduler. */
const MUTABLE = [
  'status',
  'period_anchor',
  'anchor_index',
  'period_index',
  'current_period_start',
  'current_period_end',
  'trial_end',
  'cancelled_at',
  'cancel_reason',
  'cancelled_by',
  'cancelled_immediately',
  'receive_confirmations',
  'receive_reminders',
  'metadata',
  'renewal_payment_id',
  'renewal_for',
  'renewal_expires_at',
  'reminded_for',
  'reminder_notified_at',
  'nwc_next_attempt_at',
  'nwc_fallback',
  'nwc_charging_since',
  'renewal_refused_for',
  'renewal_refused_at',
  'renewal_refused_reason',
  'paused_at',
  'stopped_at_ms',
  'pending_since',
  'dunning_from',
  'updated_at',
] as const;

/** SQL types of the MUTABLE columns, for the arrays of a multi-row compare-and-set. */
const MUTABLE_TYPES: Record<(typeof MUTABLE)[number], string> = {
  status: 'text',
  period_anchor: 'bigint',
  anchor_index: 'int',
  period_index: 'int',
  current_period_start: 'bigint',
  current_period_end: 'bigint',
  trial_end: 'bigint',
  cancelled_at: 'bigint',
  cancel_reason: 'text',
  cancelled_by: 'text',
  cancelled_immediately: 'boolean',
  receive_confirmations: 'boolean',
  receive_reminders: 'boolean',
  metadata: 'jsonb',
  renewal_payment_id: 'text',
  renewal_for: 'bigint',
  renewal_expires_at: 'bigint',
  reminded_for: 'bigint',
  reminder_notified_at: 'bigint',
  nwc_next_attempt_at: 'bigint',
  nwc_fallback: 'boolean',
  nwc_charging_since: 'bigint',
  renewal_refused_for: 'bigint',
  renewal_refused_at: 'bigint',
  renewal_refused_reason: 'text',
  paused_at: 'bigint',
  stopped_at_ms: 'bigint',
  pending_since: 'bigint',
  dunning_from: 'bigint',
  updated_at: 'bigint',
};

export function toSubscription(r: SubRow, now: number): Subscription {
  return {
    id: r.id,
    plan_id: r.plan_id,
    subscriber_id: r.subscriber_id,
    status: r.status,
    current_period_start: r.current_period_start,
    current_period_end: r.current_period_end,
    trial_end: r.trial_end,
    cancelled_at: r.cancelled_at,
    created_at: r.created_at,
    updated_at: r.updated_at,
    payment_method: r.payment_method,
    amount_sats: r.amount_sats,
    interval: r.interval,
    has_access: hasAccess(r, now),
    cancel_reason: r.cancel_reason,
    cancelled_by: whoCancelled(r),
    receive_confirmations: r.receive_confirmations,
    receive_reminders: r.receive_reminders,
    metadata: r.metadata,
  };
}

type SubFilter = { wallet_id: string; status?: SubscriptionStatus; statuses?: readonly SubscriptionStatus[]; plan_id?: string; subscriber_id?: string };

/** The live statuses as an SQL list, from the one definition in the domain (a literal list keeps the partial indexes usable). */
const LIVE_IN = LIVE.map((s) => `'${s}'`).join(', ');

export class SubscriptionsRepo {
  constructor(
    private readonly schema = 'billing',
    private readonly policy: SchedulePolicy = { dunning_days: 14 },
  ) {
    const read = (where: string) => `SELECT ${COLS} FROM ${schema}.subscriptions WHERE ${where}`;
    this.getSql = {
      id: { read: keyLookup(read('id = $1')), lock: `${read('id = $1')} FOR UPDATE` },
      wallet: { read: keyLookup(read('id = $1 AND wallet_id = $2')), lock: `${read('id = $1 AND wallet_id = $2')} FOR UPDATE` },
    };
  }

  /** By id alone or scoped to a wallet, read or locked. */
  private readonly getSql: Record<'id' | 'wallet', { read: string; lock: string }>;

  /** Every write stores when the scheduler must look at the row next, as domain/schedule.ts decides. */
  private nextDue(r: Omit<SubRow, 'version'>): number | null {
    return nextDueAt(r, r.updated_at, this.policy);
  }

  /**
   * False when the contact already has a live subscription to the plan (or the id is taken), or the plan
   * is archived by now (read in this statement's snapshot: after `lockForCheckout`, an archive committed
   * before is seen); the caller's transaction goes on. ON CONFLICT rather than a savepoint: two round
   * trips fewer per checkout.
   */
  async insertIfNew(q: Queryable, r: Omit<SubRow, 'version'>): Promise<boolean> {
    const cols = [
      ...COLS.split(',')
        .map((c) => c.trim())
        .filter((c) => c !== 'version'),
      'next_due_at',
    ];
    const row = { ...r, next_due_at: this.nextDue(r) };
    const { rowCount } = await q.query(
      `INSERT INTO ${this.schema}.subscriptions (${cols.join(', ')}) SELECT ${cols.map((c, i) => `$${i + 1}${c === 'metadata' ? '::jsonb' : ''}`).join(', ')}
       WHERE EXISTS (SELECT 1 FROM ${this.schema}.plans WHERE id = $${cols.indexOf('plan_id') + 1} AND NOT is_deleted) ON CONFLICT DO NOTHING`,
      cols.map((c) => (c === 'metadata' ? JSON.stringify(r.metadata) : (row as Record<string, unknown>)[c])),
    );
    return rowCount === 1;
  }

  async get(q: Queryable, walletId: string | null, id: string, forUpdate = false): Promise<SubRow | undefined> {
    const sql = this.getSql[walletId ? 'wallet' : 'id'][forUpdate ? 'lock' : 'read'];
    const { rows } = await q.query<SubRow>(sql, walletId ? [id, walletId] : [id]);
    return rows[0];
  }

  /** Compare-and-set on `version`: false when another writer moved the row first. */
  async save(q: Queryable, r: SubRow): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.schema}.subscriptions SET ${MUTABLE.map((c, i) => `${c} = $${i + 4}`).join(', ')}, next_due_at = $3, version = version + 1
       WHERE id = $1 AND version = $2`,
      [r.id, r.version, this.nextDue(r), ...MUTABLE.map((c) => (c === 'metadata' ? JSON.stringify(r.metadata) : r[c]))],
    );
    return rowCount === 1;
  }

  /**
   * `save` for many rows in two statements: each row is written only if its `version` is still the one
   * given (the others were moved by another writer and are skipped, as `save` answers false). The rows
   * are locked in id order first, so two replicas saving overlapping batches wait on each other instead
   * of deadlocking. Returns the ids saved.
   */
  async saveMany(q: Queryable, rows: SubRow[]): Promise<Set<string>> {
    if (!rows.length) return new Set();
    const ids = rows.map((r) => r.id);
    await q.query(`SELECT id FROM ${this.schema}.subscriptions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [ids]);
    const cols = MUTABLE.map((c, i) => `$${i + 4}::${MUTABLE_TYPES[c]}[]`).join(', ');
    const { rows: saved } = await q.query<{ id: string }>(
      `UPDATE ${this.schema}.subscriptions s SET ${MUTABLE.map((c) => `${c} = v.${c}`).join(', ')}, next_due_at = v.next_due_at, version = s.version + 1
       FROM unnest($1::text[], $2::int[], $3::bigint[], ${cols}) AS v(id, version, next_due_at, ${MUTABLE.join(', ')})
       WHERE s.id = v.id AND s.version = v.version RETURNING s.id`,
      [
        ids,
        rows.map((r) => r.version),
        rows.map((r) => this.nextDue(r)),
        ...MUTABLE.map((c) => rows.map((r) => (c === 'metadata' ? JSON.stringify(r.metadata) : r[c]))),
      ],
    );
    return new Set(saved.map((r) => r.id));
  }

  /** Nothing was due after all (the row was looked at early): store when it next is, without a version change. */
  async setNextDue(q: Queryable, r: SubRow, now: number): Promise<void> {
    await q.query(`UPDATE ${this.schema}.subscriptions SET next_due_at = $3 WHERE id = $1 AND version = $2`, [r.id, r.version, nextDueAt(r, now, this.policy)]);
  }

  /** The key of the newest invoice of a checkout waiting for its first payment (null: its first invoice's). */
  async checkoutInvoiceKey(q: Queryable, id: string): Promise<string | null> {
    const { rows } = await q.query<{ k: string | null }>(`SELECT checkout_invoice_key AS k FROM ${this.schema}.subscriptions WHERE id = $1`, [id]);
    return rows[0]?.k ?? null;
  }

  /** Not a lifecycle change (no new version): a stale key only makes the next ask walk a little further. */
  async setCheckoutInvoiceKey(q: Queryable, id: string, key: string): Promise<void> {
    await q.query(`UPDATE ${this.schema}.subscriptions SET checkout_invoice_key = $2 WHERE id = $1`, [id, key]);
  }

  /** The subscription an earlier checkout with this (hashed) Idempotency-Key created, newest first. */
  async byCheckoutKey(q: Queryable, walletId: string, key: string): Promise<SubRow | undefined> {
    const { rows } = await q.query<SubRow>(
      `SELECT ${COLS} FROM ${this.schema}.subscriptions WHERE wallet_id = $1 AND checkout_key = $2 ORDER BY created_at DESC, id DESC LIMIT 1`,
      [walletId, key],
    );
    return rows[0];
  }

  /** Whether `subscriptionId` is the subscriber's first subscription (so its checkout created the subscriber). */
  async isFirstOfSubscriber(q: Queryable, subscriberId: string, subscriptionId: string): Promise<boolean> {
    const { rows } = await q.query<{ id: string }>(`SELECT id FROM ${this.schema}.subscriptions WHERE subscriber_id = $1 ORDER BY created_at, id LIMIT 1`, [
      subscriberId,
    ]);
    return rows[0]?.id === subscriptionId;
  }

  async list(q: Queryable, f: SubFilter, limit: number, offset: number): Promise<Paginated<SubRow>> {
    const where = ['wallet_id = $1'];
    const args: unknown[] = [f.wallet_id];
    if (f.status) where.push(`status = $${args.push(f.status)}`);
    if (f.statuses) where.push(`status = ANY($${args.push(f.statuses)})`);
    if (f.plan_id) where.push(`plan_id = $${args.push(f.plan_id)}`);
    if (f.subscriber_id) where.push(`subscriber_id = $${args.push(f.subscriber_id)}`);
    const w = where.join(' AND ');
    const [items, count] = await Promise.all([
      q.query<SubRow>(`SELECT ${COLS} FROM ${this.schema}.subscriptions WHERE ${w} ORDER BY created_at DESC, id DESC LIMIT ${limit} OFFSET ${offset}`, args),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.schema}.subscriptions WHERE ${w}`, args),
    ]);
    return { items: items.rows, total: count.rows[0]?.n ?? 0, limit, offset };
  }

  /** The live subscription of a subscriber to a plan (there is at most one). */
  async liveOf(q: Queryable, subscriberId: string, planId: string): Promise<SubRow | undefined> {
    const { rows } = await q.query<SubRow>(
      `SELECT ${COLS} FROM ${this.schema}.subscriptions WHERE subscriber_id = $1 AND plan_id = $2 AND status IN (${LIVE_IN})`,
      [subscriberId, planId],
    );
    return rows[0];
  }

  /** Locked in id order, as `saveMany` locks: a sweep's batch and a plan archive wait on each other, never deadlock. */
  async liveOfPlan(q: Queryable, planId: string): Promise<SubRow[]> {
    const { rows } = await q.query<SubRow>(
      `SELECT ${COLS} FROM ${this.schema}.subscriptions WHERE plan_id = $1 AND status IN (${LIVE_IN}) ORDER BY id FOR UPDATE`,
      [planId],
    );
    return rows;
  }

  /** How many subscriptions archiving the plan cancelled (a repeated archive answers the same). */
  async countCancelledByArchive(q: Queryable, planId: string): Promise<number> {
    const { rows } = await q.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${this.schema}.subscriptions WHERE plan_id = $1
       AND (cancelled_by = 'plan_archived' OR (cancelled_by IS NULL AND cancel_reason = 'plan archived'))`,
      [planId],
    );
    return rows[0]?.n ?? 0;
  }

  /** The subscription's NWC wallet is gone: it renews by invoice from now on. True when this call changed it. */
  async setNwcFallback(q: Queryable, walletId: string, id: string, now: number): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.schema}.subscriptions SET nwc_fallback = true, next_due_at = 0, version = version + 1, updated_at = $3
       WHERE id = $1 AND wallet_id = $2 AND payment_method = 'nwc' AND NOT nwc_fallback`,
      [id, walletId, now],
    );
    return rowCount === 1;
  }

  /**
   * Links a resume's renewal payment to the pending subscription, once: false when one is linked already
   * (the resume and a later sweep both made it: the subscriber is sent it once) or it is no longer
   * pending. `chargingSince`: an NWC wallet is being asked to pay it, and the reminder is owed until
   * `settleResumeCharge`.
   */
  async linkResumePayment(q: Queryable, id: string, paymentId: string, chargingSince: number | null): Promise<boolean> {
    const { rowCount } = await q.query(
      // Made after all: a refusal of it before no longer holds (domain/schedule.ts renewalMade).
      `UPDATE ${this.schema}.subscriptions SET renewal_payment_id = $2, nwc_charging_since = $3,
         renewal_refused_for = NULL, renewal_refused_at = NULL, renewal_refused_reason = NULL, version = version + 1
       WHERE id = $1 AND status = 'pending' AND renewal_payment_id IS NULL`,
      [id, paymentId, chargingSince],
    );
    return (rowCount ?? 0) > 0;
  }

  /** Ends a resume's wallet charge, once: true for the caller that ended it (and sends the reminder if owed). */
  async settleResumeCharge(q: Queryable, id: string): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.schema}.subscriptions SET nwc_charging_since = NULL, version = version + 1
       WHERE id = $1 AND status = 'pending' AND nwc_charging_since IS NOT NULL`,
      [id],
    );
    return (rowCount ?? 0) > 0;
  }

  /** What an event about a subscription names besides the row: its plan's name and the subscriber's contact. */
  async eventNames(q: Queryable, planId: string, subscriberId: string): Promise<{ plan_name: string; email: string | null; name: string | null } | undefined> {
    const { rows } = await q.query<{ plan_name: string; email: string | null; name: string | null }>(
      `SELECT p.name AS plan_name, c.email, c.name FROM ${this.schema}.plans p, ${this.schema}.subscribers c WHERE p.id = $1 AND c.id = $2`,
      [planId, subscriberId],
    );
    return rows[0];
  }

  /**
   * `eventNames` of many subscriptions in one statement, by `plan_id/subscriber_id`. Plans and subscribers
   * are looked up by their keys (`= ANY`): a join on an unnest of the pairs was planned, with a plans table
   * too small for autovacuum to analyze, as a hash join reading every subscriber for each batch.
   */
  async eventNamesOf(
    q: Queryable,
    subs: { plan_id: string; subscriber_id: string }[],
  ): Promise<Map<string, { plan_name: string; email: string | null; name: string | null }>> {
    const { rows } = await q.query<{ plan: boolean; id: string; name: string | null; email: string | null }>(
      `SELECT true AS plan, id, name, NULL::text AS email FROM ${this.schema}.plans WHERE id = ANY($1::text[])
       UNION ALL
       SELECT false, id, name, email FROM ${this.schema}.subscribers WHERE id = ANY($2::text[])`,
      [[...new Set(subs.map((s) => s.plan_id))], [...new Set(subs.map((s) => s.subscriber_id))]],
    );
    const plans = new Map(rows.filter((r) => r.plan).map((r) => [r.id, r.name ?? '']));
    const contacts = new Map(rows.filter((r) => !r.plan).map((r) => [r.id, { email: r.email, name: r.name }]));
    const out = new Map<string, { plan_name: string; email: string | null; name: string | null }>();
    for (const { plan_id, subscriber_id } of subs) {
      const plan_name = plans.get(plan_id);
      const contact = contacts.get(subscriber_id);
      if (plan_name !== undefined && contact) out.set(`${plan_id}/${subscriber_id}`, { plan_name, ...contact });
    }
    return out;
  }

  /** Records many renewal payments, each with the period it pays for, in one statement. */
  async recordRenewalPayments(q: Queryable, items: { subscription_id: string; payment_id: string; period_end: number }[]): Promise<void> {
    if (!items.length) return;
    await q.query(
      `INSERT INTO ${this.schema}.renewal_payments (payment_id, subscription_id, period_end)
       SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) ON CONFLICT DO NOTHING`,
      [items.map((i) => i.payment_id), items.map((i) => i.subscription_id), items.map((i) => i.period_end)],
    );
  }

  /** Records a renewal payment and the period it pays for. */
  async recordRenewalPayment(q: Queryable, subscriptionId: string, paymentId: string, periodEnd: number): Promise<void> {
    await q.query(`INSERT INTO ${this.schema}.renewal_payments (payment_id, subscription_id, period_end) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [
      paymentId,
      subscriptionId,
      periodEnd,
    ]);
  }

  /**
   * Records renewal payments nobody was sent, to be withdrawn at the payments service (`withdrawn` once
   * that is done); one recorded already (linked before) is flagged all the same.
   */
  async recordToWithdraw(q: Queryable, items: { subscription_id: string; payment_id: string; period_end: number }[]): Promise<void> {
    if (!items.length) return;
    await q.query(
      `INSERT INTO ${this.schema}.renewal_payments (payment_id, subscription_id, period_end, withdraw)
       SELECT *, true FROM unnest($1::text[], $2::text[], $3::bigint[]) ON CONFLICT (payment_id) DO UPDATE SET withdraw = true`,
      [items.map((i) => i.payment_id), items.map((i) => i.subscription_id), items.map((i) => i.period_end)],
    );
  }

  /** Up to `limit` renewal payments still to be withdrawn at the payments service. */
  async toWithdraw(q: Queryable, limit: number): Promise<{ wallet_id: string; subscription_id: string; payment_id: string }[]> {
    const { rows } = await q.query<{ wallet_id: string; subscription_id: string; payment_id: string }>(
      `SELECT s.wallet_id, r.subscription_id, r.payment_id FROM ${this.schema}.renewal_payments r
       JOIN ${this.schema}.subscriptions s ON s.id = r.subscription_id WHERE r.withdraw LIMIT $1`,
      [limit],
    );
    return rows;
  }

  /** These renewal payments were withdrawn at the payments service. */
  async withdrawn(q: Queryable, paymentIds: string[]): Promise<void> {
    if (!paymentIds.length) return;
    await q.query(`UPDATE ${this.schema}.renewal_payments SET withdraw = false WHERE payment_id = ANY($1::text[]) AND withdraw`, [paymentIds]);
  }

  /** The renewal payments issued for the period ending at `from` now pay the one ending at `to` (an extend). */
  async moveRenewalPeriod(q: Queryable, subscriptionId: string, from: number, to: number): Promise<void> {
    if (from === to) return;
    await q.query(`UPDATE ${this.schema}.renewal_payments SET period_end = $3 WHERE subscription_id = $1 AND period_end = $2`, [subscriptionId, from, to]);
  }

  /** The period end a renewal payment was issued for, if it is one. */
  async renewalPeriodOf(q: Queryable, paymentId: string): Promise<number | undefined> {
    const { rows } = await q.query<{ period_end: number }>(`SELECT period_end FROM ${this.schema}.renewal_payments WHERE payment_id = $1`, [paymentId]);
    return rows[0]?.period_end;
  }

  /** Rows whose next due time (domain/schedule.ts `nextDueAt`, stored on every save) has come. */
  async due(q: Queryable, now: number, limit: number): Promise<SubRow[]> {
    const { rows } = await q.query<SubRow>(`SELECT ${COLS} FROM ${this.schema}.subscriptions WHERE next_due_at <= $1 ORDER BY next_due_at LIMIT $2`, [
      now,
      limit,
    ]);
    return rows;
  }
}
