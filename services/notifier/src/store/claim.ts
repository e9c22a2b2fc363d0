/**
 * What one claim of due work (webhook deliveries, notifications) may take: due at `now`, at most `limit`,
 * leased for `leaseS` seconds, none of those `running` here, and of each group (an endpoint, a notice's
 * route) only as many as make `perGroup` with those `busy` has under way here.
 */
export interface Claim {
  now: number;
  limit: number;
  leaseS: number;
  running: readonly string[];
  perGroup: number;
  busy: ReadonlyMap<string, number>;
}

/**
 * The parameters of `claimSql`, in its order: $1 now, $2 limit, $3 lease, $4 running, then the share:
 * $5 the busy groups, $6 perGroup, $7 how many each has under way (the candidate steps read $5..$7 with
 * `unnest($5::text[], $7::int[])`).
 */
export const claimParams = (c: Claim): unknown[] => [c.now, c.limit, c.leaseS, c.running, [...c.busy.keys()], c.perGroup, [...c.busy.values()]];

/**
 * One claim statement. `candidates` (a query yielding `id, next_attempt_at`) chooses without locks; only
 * the rows it chose are locked, SKIP LOCKED, checked again (another replica may have claimed one since)
 * and leased: the moved next_attempt_at keeps other replicas off them while this one sends, without a
 * transaction held open over the send, and a worker that dies mid-send leaves them due again when the
 * lease ends. Locking in the per-group step held up to a share of rows of every backlogged group to claim
 * a few hundred (found in review). `t`: the table, `a`: its alias; `join` adds tables to the UPDATE
 * (`from` list and condition) for `returning`.
 */
export function claimSql(o: { with?: string; candidates: string; t: string; a: string; join?: { from: string; on: string }; returning: string }): string {
  const { t, a } = o;
  return `WITH ${o.with ? `RECURSIVE ${o.with},` : ''}
       candidates AS (${o.candidates} ORDER BY next_attempt_at LIMIT $2),
       due AS (
         SELECT ${a}.id FROM ${t} ${a} JOIN candidates c ON c.id = ${a}.id
          WHERE ${a}.status = 'pending' AND ${a}.next_attempt_at <= $1
          FOR UPDATE OF ${a} SKIP LOCKED)
       UPDATE ${t} ${a} SET next_attempt_at = $1 + $3
         FROM due${o.join ? `, ${o.join.from}` : ''} WHERE ${a}.id = due.id${o.join ? ` AND ${o.join.on}` : ''}
       RETURNING ${o.returning}`;
}

/** `cols` ("a, b, c") each prefixed with the alias `a`. */
export const qualified = (a: string, cols: string): string =>
  cols
    .split(',')
    .map((c) => `${a}.${c.trim()}`)
    .join(', ');
