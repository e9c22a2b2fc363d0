import { createHash, randomUUID } from 'node:crypto';
import { routes, type RouteDef } from '@sb/contracts';
import type { Handler } from './bus.js';
import type { Db, Queryable } from './db.js';
import { conflict, unavailable } from './errors.js';
import type { Logger } from './logger.js';
import { Poller } from './poller.js';
import { routeHandler, type RouteId, type RouteReply, type RouteRequest } from './route-handler.js';
import type { SecretBox } from './secrets.js';

/**
 * The answers a service gave to requests that carried an Idempotency-Key, each written in the transaction
 * of the change it answers (in a service's migrations; a table alone, so `compatible`).
 * `key`: the gateway's SHA-256 of the caller's scope and key (Caller.idempotency_key), never the key itself.
 * `answer_sealed` NULL: a claim, while an effect outside the database (a message sent) is under way;
 * `claim_id` names the try that holds it, so that only that try fills or frees it.
 */
export const answeredRequestsTableSql = `
CREATE TABLE answered_requests (
  key TEXT PRIMARY KEY,
  request_hash TEXT NOT NULL,
  answer_sealed TEXT,
  claim_id TEXT,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX answered_requests_created ON answered_requests (created_at);
`;

/** As long as the gateway keeps an Idempotency-Key (behaviour.md): after that the key is a new request. */
const KEPT = "interval '24 hours'";
/**
 * How long a claim holds its key without an answer: far longer than a route waits for its effect (45 s)
 * and than its sends are allowed (NOTIFY_TIMEOUT_MS per call); a claim older than that was left by a
 * process that died mid-effect, and the key may run again. A try whose claim lapsed and was taken over
 * can neither fill nor free the newer one (`claim_id`).
 */
const CLAIM_LEASE = "interval '10 minutes'";

/** What a key holds: the answer, or a claim (an effect under way, `answer` absent). */
export interface Recorded {
  request_hash: string;
  answer?: unknown;
}

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

  async find(q: Queryable, key: string): Promise<Recorded | undefined> {
    const { rows } = await q.query<{ request_hash: string; answer_sealed: string | null }>(
      `SELECT request_hash, answer_sealed FROM ${this.t} WHERE key = $1 AND created_at > now() - ${KEPT}
         AND (answer_sealed IS NOT NULL OR created_at > now() - ${CLAIM_LEASE})`,
      [key],
    );
    const row = rows[0];
    if (!row) return undefined;
    if (row.answer_sealed === null) return { request_hash: row.request_hash };
    let answer: unknown;
    try {
      answer = this.open(row.answer_sealed);
    } catch {
      // Sealed with a key no longer configured (SECRETS_KEY_PREVIOUS dropped within the day): running the
      // write again could apply it twice.
      throw conflict('The answer to this Idempotency-Key can no longer be replayed; send the request with a new key');
    }
    return { request_hash: row.request_hash, answer };
  }

  /** The key for an effect outside the database: the claim's id, or undefined when another try holds it or answered it. */
  async claim(q: Queryable, key: string, requestHash: string): Promise<string | undefined> {
    const id = randomUUID();
    const { rowCount } = await q.query(
      `INSERT INTO ${this.t} (key, request_hash, answer_sealed, claim_id) VALUES ($1, $2, NULL, $3)
       ON CONFLICT (key) DO UPDATE SET request_hash = EXCLUDED.request_hash, answer_sealed = NULL, claim_id = EXCLUDED.claim_id, created_at = now()
       WHERE ${this.t}.created_at <= now() - ${KEPT} OR (${this.t}.answer_sealed IS NULL AND ${this.t}.created_at <= now() - ${CLAIM_LEASE})`,
      [key, requestHash, id],
    );
    return rowCount === 1 ? id : undefined;
  }

  /** The answer of the claim `claimId`, once its effect is done (nothing when its claim was taken over). */
  async fill(q: Queryable, key: string, claimId: string, answer: unknown): Promise<void> {
    await q.query(`UPDATE ${this.t} SET answer_sealed = $3, claim_id = NULL WHERE key = $1 AND claim_id = $2 AND answer_sealed IS NULL`, [
      key,
      claimId,
      this.seal(answer),
    ]);
  }

  /** A claim whose effect failed: the key runs again on the next try. */
  async release(q: Queryable, key: string, claimId: string): Promise<void> {
    await q.query(`DELETE FROM ${this.t} WHERE key = $1 AND claim_id = $2 AND answer_sealed IS NULL`, [key, claimId]);
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
export type Keep = (<A>(tx: Queryable, answer: A) => Promise<A>) & {
  /**
   * A write of one statement and its answer: in a transaction with the answer when the request has a
   * key, on the pool without one (no BEGIN and COMMIT for a request that records nothing: a third of a
   * plan creation's round trips).
   */
  write<A>(db: Db, write: (q: Queryable) => Promise<A>): Promise<A>;
};

function keeping(record: (<A>(tx: Queryable, answer: A) => Promise<A>) | undefined): Keep {
  const keep = record ?? (async <A>(_tx: Queryable, answer: A) => answer);
  return Object.assign(keep, {
    write: <A>(db: Db, write: (q: Queryable) => Promise<A>): Promise<A> => (record ? db.tx(async (tx) => record(tx, await write(tx))) : write(db)),
  });
}

/**
 * Runs an effect that no rollback undoes (a message sent) under a claim of the request's key, committed
 * before the effect starts, and records its answer after it. No transaction or connection is held while
 * the effect waits on the network. Another try of the key meanwhile is 503 "still in progress" (to be
 * retried: a 4xx the gateway would keep as the key's answer), and after it the recorded answer; a failed
 * effect frees the key.
 */
export type Hold = <A>(effect: () => Promise<A>) => Promise<A>;

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
  const route = (routes as readonly RouteDef[]).find((r) => r.id === id);
  // The gateway passes a key only with these (PUT and DELETE are idempotent by state): anything else
  // would be wrapped for nothing, and read as protected.
  if (route && route.method !== 'post' && route.method !== 'patch')
    throw new Error(`answerOnce: ${id} is a ${route.method} route, which carries no Idempotency-Key`);
  const shownOnce = route?.shownOnce;
  return routeHandler(id, async (req) => {
    const key = req.caller.idempotency_key;
    if (!key) return handle(req, keeping(undefined), (effect) => effect());
    // The gateway refuses a key reused with another request while it holds the key; this holds after it freed it.
    const hash = createHash('sha256')
      .update(JSON.stringify([id, req.params, req.query, req.body ?? null]))
      .digest('hex');
    const recorded = async () => {
      const found = await answered.find(db, key);
      if (found && found.request_hash !== hash) throw conflict('Idempotency-Key was already used with a different request');
      // A 503, not a 409: the gateway keeps a 4xx as the key's answer for good, and this one is not final.
      if (found && !('answer' in found)) throw unavailable('A request with this Idempotency-Key is still in progress; retry shortly');
      return found && (found.answer as RouteReply<I>);
    };
    const before = await recorded();
    if (before !== undefined) return before;
    const meanwhile = () => conflict('A request with this Idempotency-Key was answered meanwhile');
    try {
      return await handle(
        req,
        keeping(async (tx, answer) => {
          if (!(await answered.record(tx, key, hash, withoutShownOnce(answer, shownOnce)))) throw meanwhile();
          return answer;
        }),
        async (effect) => {
          // Claimed by another try: its answer, or 409 while its effect is under way.
          const claim = await answered.claim(db, key, hash);
          if (!claim) return ((await recorded()) as Awaited<ReturnType<typeof effect>> | undefined) ?? Promise.reject(meanwhile());
          let answer: Awaited<ReturnType<typeof effect>>;
          try {
            answer = await effect();
          } catch (err) {
            await answered.release(db, key, claim).catch(() => undefined);
            throw err;
          }
          // Not recorded (the database gone just now): the claim holds the key until its lease ends.
          await answered.fill(db, key, claim, withoutShownOnce(answer, shownOnce));
          return answer;
        },
      );
    } catch (err) {
      // Another try made the change first (this one then found it made: a 409, or lost the race on the key).
      const answer = await recorded().catch(() => undefined);
      if (answer !== undefined) return answer;
      throw err;
    }
  });
}
