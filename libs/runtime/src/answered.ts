import { createHash } from 'node:crypto';
import { routes, type RouteDef } from '@sb/contracts';
import type { Handler } from './bus.js';
import { lockUntilCommit, type Db, type Queryable } from './db.js';
import { conflict } from './errors.js';
import type { Logger } from './logger.js';
import { Poller } from './poller.js';
import { routeHandler, type RouteId, type RouteReply, type RouteRequest } from './route-handler.js';
import type { SecretBox } from './secrets.js';

/**
 * The answers a service gave to requests that carried an Idempotency-Key, each written in the transaction
 * of the change it answers (in a service's migrations; a table alone, so `compatible`).
 * `key`: the gateway's SHA-256 of the caller's scope and key (Caller.idempotency_key), never the key itself.
 */
export const answeredRequestsTableSql = `
CREATE TABLE answered_requests (
  key TEXT PRIMARY KEY,
  request_hash TEXT NOT NULL,
  answer_sealed TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX answered_requests_created ON answered_requests (created_at);
`;

/** As long as the gateway keeps an Idempotency-Key (behaviour.md): after that the key is a new request. */
const KEPT = "interval '24 hours'";

/**
 * The answers kept by `answerOnce`. Sealed with SECRETS_KEY (an answer may name what its owner alone
 * should see); kept 24 h, so a key rotated away opens them as long as SECRETS_KEY_PREVIOUS keeps it.
 * `'unsealed'`: a service without SECRETS_KEY whose answers name nothing secret (payments' watch-only
 * wallets, never their key) keeps them as JSON.
 */
export class AnsweredRequests {
  private readonly t: string;

  constructor(
    schema: string,
    private readonly box: SecretBox | 'unsealed',
  ) {
    this.t = `${schema}.answered_requests`;
  }

  private seal(answer: unknown): string {
    const json = JSON.stringify(answer ?? null);
    return this.box === 'unsealed' ? json : this.box.seal(json);
  }

  private open(stored: string): unknown {
    return JSON.parse(this.box === 'unsealed' ? stored : this.box.open(stored));
  }

  async find(q: Queryable, key: string): Promise<{ request_hash: string; answer: unknown } | undefined> {
    const { rows } = await q.query<{ request_hash: string; answer_sealed: string }>(
      `SELECT request_hash, answer_sealed FROM ${this.t} WHERE key = $1 AND created_at > now() - ${KEPT}`,
      [key],
    );
    const row = rows[0];
    return row && { request_hash: row.request_hash, answer: this.open(row.answer_sealed) };
  }

  /**
   * False when another try of the request recorded its answer first (its transaction committed while this
   * one waited on the key): this one must roll back. An expired record of the key is replaced.
   */
  async record(tx: Queryable, key: string, requestHash: string, answer: unknown): Promise<boolean> {
    const { rowCount } = await tx.query(
      `INSERT INTO ${this.t} (key, request_hash, answer_sealed) VALUES ($1, $2, $3)
       ON CONFLICT (key) DO UPDATE SET request_hash = EXCLUDED.request_hash, answer_sealed = EXCLUDED.answer_sealed, created_at = now()
       WHERE ${this.t}.created_at <= now() - ${KEPT}`,
      [key, requestHash, this.seal(answer)],
    );
    return rowCount === 1;
  }

  /** In bounded batches: a backlog (after a long stop) must not become one statement past the query timeout. */
  async purgeExpired(q: Queryable, batch = 5000): Promise<number> {
    let purged = 0;
    for (;;) {
      const { rowCount } = await q.query(
        `DELETE FROM ${this.t} WHERE key = ANY (ARRAY(SELECT key FROM ${this.t} WHERE created_at <= now() - ${KEPT} LIMIT $1))`,
        [batch],
      );
      purged += rowCount ?? 0;
      if ((rowCount ?? 0) < batch) return purged;
    }
  }

  /** Expired answers removed every minute, so the table holds a day of keyed writes at most. */
  purging(db: Queryable, log: Logger): Poller {
    return new Poller('answered requests purge', 60_000, async () => (await this.purgeExpired(db), false), log);
  }
}

/** Records a write's answer in the transaction that made the write, and hands the answer back. */
export type Keep = <A>(tx: Queryable, answer: A) => Promise<A>;

/**
 * Runs an effect that no rollback undoes (a message sent) in a transaction holding the request's key, and
 * answers what it answers (its `keep`, in that transaction). Another try of the key waits for this one:
 * it answers the recorded answer once this one committed, or runs when this one failed. Without a key
 * the effect runs with the pool and no transaction (no connection held while it waits on the network).
 */
export type Hold = <A>(effect: (tx: Queryable) => Promise<A>) => Promise<A>;

/** The answer as kept for Idempotency-Key replays: fields shown only once (secrets) are left out. */
export function withoutShownOnce(payload: unknown, fields: readonly string[] | undefined): unknown {
  if (!fields?.length || !payload || typeof payload !== 'object' || Array.isArray(payload)) return payload;
  return Object.fromEntries(Object.entries(payload).filter(([k]) => !fields.includes(k)));
}

/**
 * A write whose effect must not double when the gateway runs it again. The gateway keeps answers by
 * Idempotency-Key too, but it cannot know the outcome of a request whose answer it never got (a bus
 * timeout, a service frozen or killed mid-request): it frees the key, and the retry comes here again. So
 * the service that makes the change records the answer in the change's own transaction (`keep`, which
 * the handler calls once, in the transaction that commits its change), and a request whose key is
 * recorded gets that answer without anything done. A request that failed recorded nothing (its
 * transaction rolled back) and runs again. Two tries at once (the retry while the first still runs)
 * meet on the key's row: the later one rolls back and answers the first one's answer. That undoes only
 * what the database holds: an effect outside it (a message sent) runs in `hold`, so the later try waits
 * instead of sending again. Without a key (PUT, DELETE, internal calls) the handler just runs.
 */
export function answerOnce<I extends RouteId>(
  answered: AnsweredRequests,
  db: Db,
  id: I,
  handle: (req: RouteRequest<I>, keep: Keep, hold: Hold) => Promise<RouteReply<I>>,
): Handler {
  const shownOnce = (routes as readonly RouteDef[]).find((r) => r.id === id)?.shownOnce;
  return routeHandler(id, async (req) => {
    const key = req.caller.idempotency_key;
    if (!key)
      return handle(
        req,
        async (_tx, answer) => answer,
        (effect) => effect(db),
      );
    // The gateway refuses a key reused with another request while it holds the key; this holds after it freed it.
    const hash = createHash('sha256')
      .update(JSON.stringify([id, req.params, req.query, req.body ?? null]))
      .digest('hex');
    const recorded = async () => {
      const found = await answered.find(db, key);
      if (found && found.request_hash !== hash) throw conflict('Idempotency-Key was already used with a different request');
      return found && (found.answer as RouteReply<I>);
    };
    const before = await recorded();
    if (before !== undefined) return before;
    const meanwhile = () => conflict('A request with this Idempotency-Key was answered meanwhile');
    try {
      return await handle(
        req,
        async (tx, answer) => {
          if (!(await answered.record(tx, key, hash, withoutShownOnce(answer, shownOnce)))) throw meanwhile();
          return answer;
        },
        (effect) =>
          db.tx(async (tx) => {
            await lockUntilCommit(tx, 'answered request', key);
            if (await answered.find(tx, key)) throw meanwhile();
            return effect(tx);
          }),
      );
    } catch (err) {
      // Another try made the change first (this one then found it made: a 409, or lost the race on the key).
      const answer = await recorded().catch(() => undefined);
      if (answer !== undefined) return answer;
      throw err;
    }
  });
}
