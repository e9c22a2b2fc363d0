import type pg from 'pg';
import { until } from './http.js';

/**
 * Writes (or row locks) in a transaction of their own, left open until `release`: a service writing the
 * same rows waits there, so a race test can act while it is held at that point. `release` rolls back,
 * or runs `finish` on the same connection and commits.
 */
export async function holdUncommitted(db: pg.Pool, statements: [string, unknown[]][]) {
  const other = await db.connect();
  // A statement that fails must not leave its locks behind for the tests after it (they would hang).
  const giveUp = async (err: unknown) => {
    await other.query('ROLLBACK').catch(() => undefined);
    other.release();
    throw err;
  };
  try {
    await other.query('BEGIN');
    for (const [sql, params] of statements) await other.query(sql, params);
  } catch (err) {
    return giveUp(err);
  }
  return async (finish?: [string, unknown[]]) => {
    try {
      if (finish) await other.query(finish[0], finish[1]);
      await other.query(finish ? 'COMMIT' : 'ROLLBACK');
    } catch (err) {
      return giveUp(err);
    }
    other.release();
  };
}

/** Resolves once a session (or `sessions` of them) of the test's database waits on a lock: the held service has reached the rows. */
export const someoneWaitsOnLock = (db: pg.Pool, sessions = 1) =>
  until(
    async () => (await db.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rows[0].n,
    (n) => n >= sessions,
  );
