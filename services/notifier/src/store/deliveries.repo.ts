import type { Paginated, WebhookDelivery } from '@sb/contracts';
import { traceCarrier, type Queryable, type TraceCarrier } from '@sb/runtime';
import { type Claim, claimParams, claimSql, qualified } from './claim.js';

export type DeliveryAttempt = WebhookDelivery['attempts'][number];

export interface DeliveryRecord extends Omit<WebhookDelivery, 'attempts'> {
  wallet_id: string;
  body: string;
  first_attempt_at: number | null;
}

/** A due delivery with what sending it needs. */
export interface ClaimedDelivery extends DeliveryRecord {
  url: string;
  secret_sealed: string;
  trace_context: TraceCarrier | null;
}

export interface AttemptOutcome {
  status_code: number | null;
  error: string | null;
  duration_ms: number;
  delivered: boolean;
}

const COLS = `id, endpoint_id, wallet_id, event_id, event, body, replay_of, status, attempt_count, first_attempt_at,
  next_attempt_at, last_status_code, last_error, delivered_at, created_at`;

export class DeliveriesRepo {
  constructor(private readonly schema: string) {}

  /**
   * One delivery per (endpoint, event): a redelivered event finds its row and adds nothing. The delivery
   * keeps the active trace (the event's, or the replay request's) for its attempts.
   */
  async record(
    q: Queryable,
    r: { id: string; endpoint_id: string; wallet_id: string; event_id: string; event: string; body: string; now: number; replay_of?: string },
  ): Promise<boolean> {
    const { rowCount } = await q.query(
      `INSERT INTO ${this.schema}.deliveries (id, endpoint_id, wallet_id, event_id, event, body, replay_of, status, next_attempt_at, created_at, trace_context)
       VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $8, $9)
       ON CONFLICT (endpoint_id, event_id) WHERE replay_of IS NULL DO NOTHING`,
      [r.id, r.endpoint_id, r.wallet_id, r.event_id, r.event, r.body, r.replay_of ?? null, r.now, traceCarrier()],
    );
    return rowCount === 1;
  }

  /**
   * `record` for many deliveries in one statement (a redelivered event's find their rows and add
   * nothing); each keeps the trace it is given. Returns the event id of each delivery added.
   */
  async recordMany(
    q: Queryable,
    rs: { id: string; endpoint_id: string; wallet_id: string; event_id: string; event: string; body: string; now: number; trace: TraceCarrier | null }[],
  ): Promise<string[]> {
    if (!rs.length) return [];
    const { rows } = await q.query<{ event_id: string }>(
      `INSERT INTO ${this.schema}.deliveries (id, endpoint_id, wallet_id, event_id, event, body, status, next_attempt_at, created_at, trace_context)
       SELECT id, endpoint_id, wallet_id, event_id, event, body, 'pending', now, now, trace::jsonb
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[])
           AS r(id, endpoint_id, wallet_id, event_id, event, body, now, trace)
       ON CONFLICT (endpoint_id, event_id) WHERE replay_of IS NULL DO NOTHING
       RETURNING event_id`,
      [
        rs.map((r) => r.id),
        rs.map((r) => r.endpoint_id),
        rs.map((r) => r.wallet_id),
        rs.map((r) => r.event_id),
        rs.map((r) => r.event),
        rs.map((r) => r.body),
        rs.map((r) => r.now),
        rs.map((r) => (r.trace ? JSON.stringify(r.trace) : null)),
      ],
    );
    return rows.map((r) => r.event_id);
  }

  async get(q: Queryable, endpointId: string, id: string): Promise<DeliveryRecord | undefined> {
    const { rows } = await q.query<DeliveryRecord>(`SELECT ${COLS} FROM ${this.schema}.deliveries WHERE id = $1 AND endpoint_id = $2`, [id, endpointId]);
    return rows[0];
  }

  async list(q: Queryable, endpointId: string, limit: number, offset: number): Promise<Paginated<DeliveryRecord>> {
    const [page, count] = await Promise.all([
      q.query<DeliveryRecord>(`SELECT ${COLS} FROM ${this.schema}.deliveries WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3`, [
        endpointId,
        limit,
        offset,
      ]),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.schema}.deliveries WHERE endpoint_id = $1`, [endpointId]),
    ]);
    return { items: page.rows, total: count.rows[0]?.n ?? 0, limit, offset };
  }

  /** The attempts of each delivery, oldest first. */
  async attemptsOf(q: Queryable, deliveryIds: string[]): Promise<Map<string, DeliveryAttempt[]>> {
    const { rows } = await q.query<DeliveryAttempt & { delivery_id: string }>(
      `SELECT delivery_id, attempted_at::float8 AS attempted_at, status_code, error, duration_ms
         FROM ${this.schema}.delivery_attempts WHERE delivery_id = ANY($1) ORDER BY id`,
      [deliveryIds],
    );
    const out = new Map<string, DeliveryAttempt[]>(deliveryIds.map((id) => [id, []]));
    for (const { delivery_id, ...a } of rows) out.get(delivery_id)?.push(a);
    return out;
  }

  /**
   * Claims due deliveries (claimSql: leased, SKIP LOCKED, replicas share the work); a group is an
   * endpoint. Found from outside: receivers that never answer took every place, each for the whole
   * timeout, and every other endpoint's deliveries, of every wallet, waited behind theirs.
   */
  async claimDue(q: Queryable, c: Claim): Promise<ClaimedDelivery[]> {
    // Each endpoint's earliest due, as many as its share leaves (ordered as deliveries_endpoint_due is,
    // its endpoint fixed: an index probe per endpoint), then the earliest of those.
    const { rows } = await q.query<ClaimedDelivery>(
      claimSql({
        candidates: `SELECT x.id, x.next_attempt_at
           FROM ${this.schema}.endpoints e
           LEFT JOIN unnest($5::text[], $7::int[]) AS u(id, n) ON u.id = e.id
           CROSS JOIN LATERAL (
             SELECT d.id, d.next_attempt_at FROM ${this.schema}.deliveries d
              WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= $1 AND NOT (d.id = ANY($4::text[]))
              ORDER BY d.endpoint_id, d.next_attempt_at LIMIT GREATEST(0, $6 - COALESCE(u.n, 0))) x
          WHERE e.deleted_at IS NULL`,
        t: `${this.schema}.deliveries`,
        a: 'd',
        join: { from: `${this.schema}.endpoints e`, on: 'e.id = d.endpoint_id' },
        returning: `${qualified('d', COLS)}, d.trace_context, e.url, e.secret_sealed`,
      }),
      claimParams(c),
    );
    return rows;
  }

  /**
   * Logs each attempt and moves its delivery on: delivered, retried at `next`, or failed for good. One
   * statement for them all, so every attempt row and its delivery change together or not at all, whenever
   * the process dies (a delivery no longer pending, deleted meanwhile, keeps its attempt but not its state).
   */
  async finishAttempts(q: Queryable, done: { id: string; outcome: AttemptOutcome; now: number; next: number | null }[]): Promise<void> {
    const status = done.map(({ outcome, next }) => (outcome.delivered ? 'delivered' : next === null ? 'failed' : 'pending'));
    await q.query(
      `WITH o AS (
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::int[], $4::text[], $5::int[], $6::text[], $7::bigint[])
           WITH ORDINALITY AS o(id, now, status_code, error, duration_ms, status, next, n)),
       logged AS (
         INSERT INTO ${this.schema}.delivery_attempts (delivery_id, attempted_at, status_code, error, duration_ms)
         SELECT id, now, status_code, error, duration_ms FROM o ORDER BY n)
       UPDATE ${this.schema}.deliveries d
          SET attempt_count = d.attempt_count + 1, first_attempt_at = COALESCE(d.first_attempt_at, o.now), status = o.status,
              next_attempt_at = o.next, last_status_code = o.status_code, last_error = o.error,
              delivered_at = CASE WHEN o.status = 'delivered' THEN o.now ELSE NULL END
         FROM o WHERE d.id = o.id AND d.status = 'pending'`,
      [
        done.map((x) => x.id),
        done.map((x) => x.now),
        done.map((x) => x.outcome.status_code),
        done.map((x) => x.outcome.error),
        done.map((x) => x.outcome.duration_ms),
        status,
        done.map((x, i) => (status[i] === 'pending' ? x.next : null)),
      ],
    );
  }
}
