import type { Queryable, SecretBox } from '@sb/runtime';

type IdempotencyClaim = { kind: 'new' } | { kind: 'replay'; status: number; body: unknown } | { kind: 'mismatch' } | { kind: 'in_progress' };

/**
 * `Idempotency-Key` records, kept 24 h. A key is claimed before the request runs, so two concurrent
 * requests with one key cannot both execute. An unfinished claim holds only for its lease (the request's
 * longest run): after that the gateway that made it is taken to be gone, and the same request may claim
 * the key again.
 * A kept response may hold secrets (a checkout's portal link), so it is sealed with SECRETS_KEY, never
 * stored as it was sent.
 */
export class IdempotencyRepo {
  constructor(
    private readonly schema: string,
    private readonly box: SecretBox,
  ) {}

  async claim(q: Queryable, scope: string, key: string, requestHash: string, leaseSeconds: number): Promise<IdempotencyClaim> {
    const k = `${this.schema}.idempotency_keys`;
    const inserted = await q.query(
      `INSERT INTO ${k} (scope, key, request_hash) VALUES ($1, $2, $3)
       ON CONFLICT (scope, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, status_code = NULL,
         response_body = NULL, created_at = now()
       WHERE ${k}.created_at < now() - interval '24 hours'
          OR (${k}.status_code IS NULL AND ${k}.request_hash = EXCLUDED.request_hash
              AND ${k}.created_at < now() - make_interval(secs => $4))
       RETURNING 1`,
      [scope, key, requestHash, leaseSeconds],
    );
    if (inserted.rowCount === 1) return { kind: 'new' };
    const { rows } = await q.query<{ request_hash: string; status_code: number | null; response_body: unknown }>(
      `SELECT request_hash, status_code, response_body FROM ${this.schema}.idempotency_keys WHERE scope = $1 AND key = $2`,
      [scope, key],
    );
    const row = rows[0];
    if (!row) return this.claim(q, scope, key, requestHash, leaseSeconds);
    if (row.request_hash !== requestHash) return { kind: 'mismatch' };
    if (row.status_code === null) return { kind: 'in_progress' };
    return { kind: 'replay', status: row.status_code, body: this.opened(row.response_body) };
  }

  async complete(q: Queryable, scope: string, key: string, status: number, body: unknown): Promise<void> {
    await q.query(`UPDATE ${this.schema}.idempotency_keys SET status_code = $3, response_body = $4 WHERE scope = $1 AND key = $2`, [
      scope,
      key,
      status,
      JSON.stringify({ sealed: this.box.seal(JSON.stringify(body ?? null)) }),
    ]);
  }

  private opened(stored: unknown): unknown {
    const sealed = (stored as { sealed?: unknown } | null)?.sealed;
    return typeof sealed === 'string' ? JSON.parse(this.box.open(sealed)) : stored;
  }

  /** A failure that did not come from the domain (timeout, crash) frees the key so the client can retry. */
  async release(q: Queryable, scope: string, key: string): Promise<void> {
    await q.query(`DELETE FROM ${this.schema}.idempotency_keys WHERE scope = $1 AND key = $2 AND status_code IS NULL`, [scope, key]);
  }

  /** In bounded batches: a backlog (after a long stop) must not become one statement past the query timeout. */
  async purgeExpired(q: Queryable, batch = 5000): Promise<number> {
    let purged = 0;
    for (;;) {
      const { rowCount } = await q.query(
        `DELETE FROM ${this.schema}.idempotency_keys WHERE ctid = ANY (ARRAY(
           SELECT ctid FROM ${this.schema}.idempotency_keys WHERE created_at < now() - interval '24 hours' LIMIT $1))`,
        [batch],
      );
      purged += rowCount ?? 0;
      if ((rowCount ?? 0) < batch) return purged;
    }
  }
}
