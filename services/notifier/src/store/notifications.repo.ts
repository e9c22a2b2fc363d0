import type { Notification, NotificationListQuery, Paginated } from '@sb/contracts';
import type { Queryable } from '@sb/runtime';
import type { SendOutcome } from '../channels/outcome.js';
import { type Claim, claimParams, claimSql, qualified } from './claim.js';

export interface NotificationRecord {
  id: string;
  wallet_id: string;
  event_id: string;
  event: string;
  audience: 'subscriber' | 'owner';
  channel: 'email' | 'messenger' | 'nostr';
  /** The servers it goes through (noticeRoute); null on rows older code recorded: see routeOf. */
  route: string | null;
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

/**
 * A notification's route as the claim counts it (the expression of notifications_route_due): rows recorded
 * without one count by wallet and channel. `t`: a table alias and its dot, if any.
 */
const routeSql = (t = '') => `COALESCE(${t}route, ${t}wallet_id || ':' || ${t}channel)`;
export const routeOf = (n: Pick<NotificationRecord, 'route' | 'wallet_id' | 'channel'>): string => n.route ?? `${n.wallet_id}:${n.channel}`;

const COLS = `id, wallet_id, event_id, event, audience, channel, route, recipient, subscription_id, plan_id, settings_plan_id, subject, body_sealed,
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
         subject, body_sealed, status, next_attempt_at, created_at, route)
       SELECT id, wallet_id, event_id, event, audience, channel, recipient, subscription_id, plan_id, settings_plan_id, subject, body_sealed, 'pending',
              created_at, created_at, route
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                     $12::text[], $13::bigint[], $14::text[])
           AS r(id, wallet_id, event_id, event, audience, channel, recipient, subscription_id, plan_id, settings_plan_id, subject, body_sealed, created_at, route)
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
        col('route'),
      ],
    );
    return rows.map((r) => r.event_id);
  }

  /**
   * Claims due notices (claimSql: the same lease scheme as webhook deliveries); a group is a route
   * (routeOf: the servers a notice goes through). Found from outside: one owner's mail server that never
   * greets, with a batch of notices due, took every place, and every owner's notices waited behind it.
   */
  async claimDue(q: Queryable, c: Claim): Promise<NotificationRecord[]> {
    // Each route's earliest due, as many as its share leaves (an index probe per route, found by a skip
    // scan over the routes with pending notices), then the earliest of those. Per route, not among the
    // earliest due overall: a large backlog of one route (a plan archive's mails) would fill that window
    // claim after claim and keep every other route's notices out (found in review).
    const t = `${this.schema}.notifications`;
    const { rows } = await q.query<NotificationRecord>(
      claimSql({
        with: `routes AS (
         (SELECT ${routeSql()} AS r FROM ${t} WHERE status = 'pending' ORDER BY 1 LIMIT 1)
         UNION ALL
         SELECT (SELECT ${routeSql()} FROM ${t} WHERE status = 'pending' AND ${routeSql()} > routes.r ORDER BY 1 LIMIT 1)
           FROM routes WHERE routes.r IS NOT NULL)`,
        candidates: `SELECT x.id, x.next_attempt_at
           FROM routes
           LEFT JOIN unnest($5::text[], $7::int[]) AS u(r, n) ON u.r = routes.r
           CROSS JOIN LATERAL (
             SELECT n.id, n.next_attempt_at FROM ${t} n
              WHERE n.status = 'pending' AND ${routeSql('n.')} = routes.r
                AND n.next_attempt_at <= $1 AND NOT (n.id = ANY($4::text[]))
              ORDER BY ${routeSql('n.')}, n.next_attempt_at LIMIT GREATEST(0, $6 - COALESCE(u.n, 0))) x
          WHERE routes.r IS NOT NULL`,
        t,
        a: 'n',
        returning: qualified('n', COLS),
      }),
      claimParams(c),
    );
    return rows;
  }

  /** The settings rows (settings_plan_id) a wallet's pending messages on `channel` were made with. */
  async pendingSettingsRows(q: Queryable, walletId: string, channel: NotificationRecord['channel']): Promise<string[]> {
    const { rows } = await q.query<{ row: string }>(
      `SELECT DISTINCT settings_plan_id AS row FROM ${this.schema}.notifications WHERE wallet_id = $1 AND channel = $2 AND status = 'pending'`,
      [walletId, channel],
    );
    return rows.map((r) => r.row);
  }

  /** Records the route of the pending messages made with one settings row. */
  async setRoute(q: Queryable, walletId: string, settingsRow: string, channel: NotificationRecord['channel'], route: string): Promise<void> {
    await q.query(
      `UPDATE ${this.schema}.notifications SET route = $4
        WHERE wallet_id = $1 AND settings_plan_id = $2 AND channel = $3 AND status = 'pending' AND route IS DISTINCT FROM $4`,
      [walletId, settingsRow, channel, route],
    );
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
