import type { EventName, Paginated } from '@sb/contracts';
import type { Queryable } from '@sb/runtime';

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

  /** Only the wallet's own, live endpoints: anything else is "not found". */
  async get(q: Queryable, walletId: string, id: string): Promise<EndpointRecord | undefined> {
    const { rows } = await q.query<EndpointRecord>(`SELECT ${COLS} FROM ${this.schema}.endpoints WHERE id = $1 AND wallet_id = $2 AND deleted_at IS NULL`, [
      id,
      walletId,
    ]);
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
}
