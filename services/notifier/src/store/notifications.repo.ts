import type { Notification, NotificationListQuery, Paginated } from '@sb/contracts';
import type { Queryable } from '@sb/runtime';
import type { SendOutcome } from '../channels/outcome.js';

export interface NotificationRecord {
  id: string;
  wallet_id: string;
  event_id: string;
  event: string;
  audience: 'subscriber' | 'owner';
  channel: 'email' | 'messenger' | 'nostr';
  recipient: string;
  subscription_id: string | null;
  plan_id: string | null;
  settings_plan_id: string;
  subject: string;
  body_sealed: string;
  status: 'pending' | 'delivered' | 'failed';
  attempt_count: number;
  retry_from: number | null;
  next_attempt_at: number | null;
  last_error: string | null;
  delivered_at: number | null;
  created_at: number;
}

const COLS = `id, wallet_id, event_id, event, audience, channel, recipient, subscription_id, plan_id, settings_plan_id, subject, body_sealed,
  status, attempt_count, retry_from, next_attempt_at, last_error, delivered_at, created_at`;

export class NotificationsRepo {
  constructor(private readonly schema: string) {}

  /**
   * Once per (event, audience, channel, recipient), many in one statement: a redelivered event finds its
   * rows and adds nothing. Returns the event id of each notification added.
   */
  async recordMany(
    q: Queryable,
    rs: Omit<NotificationRecord, 'status' | 'attempt_count' | 'retry_from' | 'next_attempt_at' | 'last_error' | 'delivered_at'>[],
  ): Promise<string[]> {
    if (!rs.length) return [];
    const col = <K extends keyof (typeof rs)[number]>(k: K) => rs.map((r) => r[k]);
    const { rows } = await q.query<{ event_id: string }>(
      `INSERT INTO ${this.schema}.notifications (id, wallet_id, event_id, event, audience, channel, recipient, subscription_id, plan_id, settings_plan_id,
         subject, body_sealed, status, next_attempt_at, created_at)
       SELECT id, wallet_id, event_id, event, audience, channel, recipient, subscription_id, plan_id, settings_plan_id, subject, body_sealed, 'pending',
              created_at, created_at
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                     $12::text[], $13::bigint[])
           AS r(id, wallet_id, event_id, event, audience, channel, recipient, subscription_id, plan_id, settings_plan_id, subject, body_sealed, created_at)
       ON CONFLICT DO NOTHING
       RETURNING event_id`,
      [
        col('id'),
        col('wallet_id'),
        col('event_id'),
        col('event'),
        col('audience'),
        col('channel'),
        col('recipient'),
        col('subscription_id'),
        col('plan_id'),
        col('settings_plan_id'),
        col('subject'),
        col('body_sealed'),
        col('created_at'),
      ],
    );
    return rows.map((r) => r.event_id);
  }

  /** Same lease scheme as webhook deliveries (DeliveriesRepo.claimDue), `running` left out. */
  async claimDue(
    q: Queryable,
    now: number,
    limit: number,
    leaseS: number,
    running: readonly string[] = [],
    fair: { perChannel: number; busy: ReadonlyMap<string, number> } = { perChannel: limit, busy: new Map() },
  ): Promise<NotificationRecord[]> {
    // Of each wallet's channel ("wallet:channel", as the worker counts it) only as many as make
    // `perChannel` with those `busy` has under way here. A channel at its share is left out of the scan;
    // among the earliest due of the others (a window of a few claims) each takes the rest of its share.
    // A channel that fills its share in the window leaves fewer claimed this round, and is left out of
    // the next.
    const full = [...fair.busy].filter(([, n]) => n >= fair.perChannel).map(([g]) => g);
    const { rows } = await q.query<NotificationRecord>(
      `WITH window_ AS (
         SELECT id, wallet_id || ':' || channel AS grp, next_attempt_at FROM ${this.schema}.notifications
          WHERE status = 'pending' AND next_attempt_at <= $1 AND NOT (id = ANY($4::text[])) AND NOT (wallet_id || ':' || channel = ANY($8::text[]))
          ORDER BY next_attempt_at LIMIT $2 * 4),
       candidates AS (
         SELECT w.id FROM (SELECT *, row_number() OVER (PARTITION BY grp ORDER BY next_attempt_at, id) AS k FROM window_) w
           LEFT JOIN unnest($5::text[], $7::int[]) AS u(grp, n) ON u.grp = w.grp
          WHERE w.k <= $6 - COALESCE(u.n, 0)
          ORDER BY w.next_attempt_at LIMIT $2),
       due AS (
         SELECT n.id FROM ${this.schema}.notifications n JOIN candidates c ON c.id = n.id
          WHERE n.status = 'pending' AND n.next_attempt_at <= $1
          FOR UPDATE OF n SKIP LOCKED)
       UPDATE ${this.schema}.notifications n SET next_attempt_at = $1 + $3 FROM due WHERE n.id = due.id
       RETURNING ${COLS.split(',')
         .map((c) => `n.${c.trim()}`)
         .join(', ')}`,
      [now, limit, leaseS, running, [...fair.busy.keys()], fair.perChannel, [...fair.busy.values()], full],
    );
    return rows;
  }

  /** Logs the attempt and moves the message on: delivered, retried at `next`, or failed for good. */
  async finishAttempt(q: Queryable, n: NotificationRecord, o: SendOutcome & { duration_ms: number }, now: number, next: number | null): Promise<void> {
    await q.query(
      `INSERT INTO ${this.schema}.notification_attempts (notification_id, attempted_at, error, permanent, duration_ms) VALUES ($1, $2, $3, $4, $5)`,
      [n.id, now, o.error, o.permanent, o.duration_ms],
    );
    const status = o.delivered ? 'delivered' : next === null ? 'failed' : 'pending';
    await q.query(
      `UPDATE ${this.schema}.notifications
          SET attempt_count = attempt_count + 1, retry_from = COALESCE(retry_from, $2), status = $3, next_attempt_at = $4, last_error = $5,
              delivered_at = CASE WHEN $3 = 'delivered' THEN $2::bigint ELSE NULL END
        WHERE id = $1 AND status = 'pending'`,
      [n.id, now, status, status === 'pending' ? next : null, o.error],
    );
  }

  /** A failed message due again now, with a fresh 3-day retry window; undefined when it is not the wallet's or not failed. */
  async retry(q: Queryable, walletId: string, id: string, now: number): Promise<'retried' | 'not_failed' | 'not_found'> {
    const { rowCount } = await q.query(
      `UPDATE ${this.schema}.notifications SET status = 'pending', next_attempt_at = $3, retry_from = $3 WHERE id = $1 AND wallet_id = $2 AND status = 'failed'`,
      [id, walletId, now],
    );
    if (rowCount === 1) return 'retried';
    return (await this.get(q, walletId, id)) ? 'not_failed' : 'not_found';
  }

  async get(q: Queryable, walletId: string, id: string): Promise<NotificationRecord | undefined> {
    const { rows } = await q.query<NotificationRecord>(`SELECT ${COLS} FROM ${this.schema}.notifications WHERE id = $1 AND wallet_id = $2`, [id, walletId]);
    return rows[0];
  }

  async list(q: Queryable, walletId: string, f: NotificationListQuery): Promise<Paginated<NotificationRecord>> {
    const where = ['wallet_id = $1'];
    const args: unknown[] = [walletId];
    if (f.channel) where.push(`channel = $${args.push(f.channel)}`);
    if (f.status) where.push(`status = $${args.push(f.status)}`);
    if (f.subscription_id) where.push(`subscription_id = $${args.push(f.subscription_id)}`);
    const w = where.join(' AND ');
    const [page, count] = await Promise.all([
      q.query<NotificationRecord>(`SELECT ${COLS} FROM ${this.schema}.notifications WHERE ${w} ORDER BY id DESC LIMIT ${f.limit} OFFSET ${f.offset}`, args),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.schema}.notifications WHERE ${w}`, args),
    ]);
    return { items: page.rows, total: count.rows[0]?.n ?? 0, limit: f.limit, offset: f.offset };
  }

  async attemptsOf(q: Queryable, ids: string[]): Promise<Map<string, Notification['attempts']>> {
    const out = new Map<string, Notification['attempts']>();
    if (!ids.length) return out;
    const { rows } = await q.query<{ notification_id: string; attempted_at: number; error: string | null; permanent: boolean; duration_ms: number }>(
      `SELECT notification_id, attempted_at, error, permanent, duration_ms FROM ${this.schema}.notification_attempts WHERE notification_id = ANY ($1) ORDER BY id`,
      [ids],
    );
    for (const r of rows) {
      const list = out.get(r.notification_id) ?? [];
      list.push({ attempted_at: Number(r.attempted_at), error: r.error, permanent: r.permanent, duration_ms: r.duration_ms });
      out.set(r.notification_id, list);
    }
    return out;
  }
}
