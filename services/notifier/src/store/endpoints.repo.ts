import type { EventName, Paginated } from '@sb/contracts';
import { lockUntilCommit, type Queryable } from '@sb/runtime';

export interface EndpointRecord {
  id: string;
  wallet_id: string;
  url: string;
  events: EventName[] | null;
  plan_id: string | null;
  description: string | null;
  secret_sealed: string;
  created_at: number;
}

const COLS = 'id, wallet_id, url, events, plan_id, description, secret_sealed, created_at';

export class EndpointsRepo {
  constructor(private readonly schema: string) {}

  /**
   * Inserts `r` unless its wallet has `max` live endpoints already (false then). Creates of one wallet
   * take turns (a lock until the transaction ends), so concurrent ones cannot pass the count together.
   */
  async insertWithin(tx: Queryable, r: EndpointRecord, max: number): Promise<boolean> {
    await lockUntilCommit(tx, 'notifier.endpoints', r.wallet_id);
    const { rows } = await tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.schema}.endpoints WHERE wallet_id = $1 AND deleted_at IS NULL`, [
      r.wallet_id,
    ]);
    if (rows[0]!.n >= max) return false;
    await this.insert(tx, r);
    return true;
  }

  async insert(q: Queryable, r: EndpointRecord): Promise<void> {
    await q.query(`INSERT INTO ${this.schema}.endpoints (${COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, [
      r.id,
      r.wallet_id,
      r.url,
      r.events,
      r.plan_id,
      r.description,
      r.secret_sealed,
      r.created_at,
    ]);
  }

  /** Only the wallet's own, live endpoints (`withDeleted`: deleted ones too): anything else is "not found". */
  async get(q: Queryable, walletId: string, id: string, withDeleted = false): Promise<EndpointRecord | undefined> {
    const { rows } = await q.query<EndpointRecord>(
      `SELECT ${COLS} FROM ${this.schema}.endpoints WHERE id = $1 AND wallet_id = $2 AND ($3 OR deleted_at IS NULL)`,
      [id, walletId, withDeleted],
    );
    return rows[0];
  }

  async list(q: Queryable, walletId: string, limit: number, offset: number): Promise<Paginated<EndpointRecord>> {
    const [page, count] = await Promise.all([
      q.query<EndpointRecord>(`SELECT ${COLS} FROM ${this.schema}.endpoints WHERE wallet_id = $1 AND deleted_at IS NULL ORDER BY id DESC LIMIT $2 OFFSET $3`, [
        walletId,
        limit,
        offset,
      ]),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.schema}.endpoints WHERE wallet_id = $1 AND deleted_at IS NULL`, [walletId]),
    ]);
    return { items: page.rows, total: count.rows[0]?.n ?? 0, limit, offset };
  }

  /** Soft delete, and its pending deliveries stop: nobody wants them any more. */
  async delete(q: Queryable, walletId: string, id: string, now: number): Promise<boolean> {
    const { rowCount } = await q.query(`UPDATE ${this.schema}.endpoints SET deleted_at = $3 WHERE id = $1 AND wallet_id = $2 AND deleted_at IS NULL`, [
      id,
      walletId,
      now,
    ]);
    if (rowCount !== 1) return false;
    await q.query(
      `UPDATE ${this.schema}.deliveries SET status = 'failed', next_attempt_at = NULL, last_error = 'endpoint deleted' WHERE endpoint_id = $1 AND status = 'pending'`,
      [id],
    );
    return true;
  }

  /** The wallet's live endpoints that want this event (their event and plan filters). */
  async matching(q: Queryable, walletId: string, event: EventName, planId: string | undefined): Promise<{ id: string }[]> {
    const { rows } = await q.query<{ id: string }>(
      `SELECT id FROM ${this.schema}.endpoints
        WHERE wallet_id = $1 AND deleted_at IS NULL AND (events IS NULL OR $2 = ANY (events)) AND (plan_id IS NULL OR plan_id = $3)
        ORDER BY id`,
      [walletId, event, planId ?? null],
    );
    return rows;
  }

  /** `matching` for many events in one statement: each endpoint that wants event `i` (0-based, in the order given). */
  async matchingMany(q: Queryable, events: { walletId: string; event: EventName; planId: string | undefined }[]): Promise<{ i: number; id: string }[]> {
    const { rows } = await q.query<{ i: number; id: string }>(
      `SELECT k.i::int - 1 AS i, e.id
         FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k(wallet_id, event, plan_id, i)
         JOIN ${this.schema}.endpoints e ON e.wallet_id = k.wallet_id AND e.deleted_at IS NULL
          AND (e.events IS NULL OR k.event = ANY (e.events)) AND (e.plan_id IS NULL OR e.plan_id = k.plan_id)
        ORDER BY k.i, e.id`,
      [events.map((e) => e.walletId), events.map((e) => e.event), events.map((e) => e.planId ?? null)],
    );
    return rows;
  }
}
