import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { keepTrying, type Warns } from './listener.js';
import { assertCallerWaits } from './deadline.js';
import { tracer } from './telemetry.js';
import type { z } from 'zod';
import type { commonConfig } from './config.js';

// BIGINT columns hold satoshi amounts and Unix seconds, both far below 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

export interface Queryable {
  // biome-ignore lint/suspicious/noExplicitAny: pg's own default; every store call names its row type.
  query<R extends pg.QueryResultRow = any>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
}

export interface Db extends Queryable {
  pool: pg.Pool;
  tx<T>(fn: (client: Queryable) => Promise<T>): Promise<T>;
  ping(): Promise<boolean>;
  close(): Promise<void>;
}

/** `SELECT`, `INSERT`, ...: the span name of a statement, kept per statement text (the store's texts are few). */
const operations = new Map<string, string>();
function operationOf(text: string): string {
  let op = operations.get(text);
  if (op === undefined) {
    op = text.trimStart().split(/\s/, 1)[0]?.toUpperCase() || 'SQL';
    if (operations.size < 1000) operations.set(text, op);
  }
  return op;
}

/**
 * Named (prepared) statements: PostgreSQL parses and plans a named statement once per connection instead
 * of on every execution, which halves its CPU for the store's short statements. A text is named from its
 * third execution on, so the few texts built per request (a list's LIMIT/OFFSET, a batch's row count)
 * rarely take a name; at most `MAX_NAMED` texts are named per process, since each costs memory on every
 * connection of the pool. A name is never given to another text: pg refuses a name reused with a new text.
 */
const MAX_NAMED = 300;
const NAME_AFTER = 3;
const named = new Map<string, string>();
const executions = new Map<string, number>();
function statementName(text: string): string | undefined {
  const name = named.get(text);
  if (name !== undefined || named.size >= MAX_NAMED) return name;
  const n = (executions.get(text) ?? 0) + 1;
  if (n < NAME_AFTER) {
    if (executions.size >= 2000) executions.clear();
    executions.set(text, n);
    return undefined;
  }
  executions.delete(text);
  const fresh = `sb${named.size}`;
  named.set(text, fresh);
  return fresh;
}

/**
 * Statement texts that find at most one row by equality on every column of a primary or unique key.
 * Every other statement is planned for its values at each execution (see createDb); these, outside a
 * transaction, run on connections that keep one plan per statement (`force_generic_plan`): PostgreSQL's
 * CPU per `GET /plans/{id}` from 0.07 to 0.05-0.06 ms, the `GET` ratio to the floor from 0.65-0.66 to
 * 0.71-0.77 (bench, session 25). A plan made while the table was a page or two may be a scan of the
 * table or of another index (at that size they cost the same as the key's). The server makes it again
 * once autovacuum has analysed the grown table; until then such a connection is replaced after
 * `KEY_LOOKUP_USES` statements or `KEY_LOOKUP_SECONDS`, whichever comes first (a quiet process's
 * connections too), and its plans are made again from the table as it is.
 */
const keyLookups = new Set<string>();
/** A new connection costs about 3 ms of CPU: 3 µs per look-up, a tenth of the planning it saves. */
const KEY_LOOKUP_USES = 1000;
const KEY_LOOKUP_SECONDS = 300;

/** Marks `text` as a look-up by a whole primary or unique key (see `keyLookups`) and returns it. */
export function keyLookup(text: string): string {
  keyLookups.add(text);
  return text;
}

/**
 * A named statement whose result columns changed type since it was prepared (a migration ran while this
 * process was up): PostgreSQL refuses to run it on that connection again. Told by the routine, which does
 * not depend on the server's language.
 */
function isStalePlan(err: unknown): boolean {
  return (err as { routine?: unknown })?.routine === 'RevalidateCachedQuery';
}

/**
 * A client span per statement, child of the active span. It is not made the active span itself (no
 * context switch per query): nothing runs inside a statement.
 */
function traced(q: pg.Pool | pg.PoolClient, prepared: boolean, timeoutMs: number, system = 'postgresql'): Queryable {
  return {
    query<R extends pg.QueryResultRow>(text: string, values?: unknown[]) {
      const span = tracer().startSpan(`db ${operationOf(text)}`, { kind: SpanKind.CLIENT, attributes: { 'db.system': system, 'db.statement': text } });
      let pending: Promise<pg.QueryResult<R>>;
      try {
        const name = prepared && values !== undefined ? statementName(text) : undefined;
        pending = q.query<R>({ name, text, values, query_timeout: timeoutMs } as pg.QueryConfig);
        // A pool's connection that failed is dropped with its statements: once more, parsed afresh.
        if (name !== undefined && q instanceof pg.Pool)
          pending = pending.catch((err) => (isStalePlan(err) ? q.query<R>({ text, values, query_timeout: timeoutMs } as pg.QueryConfig) : Promise.reject(err)));
      } catch (err) {
        pending = Promise.reject(err);
      }
      return pending.then(
        (result) => {
          span.end();
          return result;
        },
        (err) => {
          span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
          span.end();
          throw err;
        },
      );
    },
  };
}

/** Connection errors of the driver and the network: the database is away, not the query wrong. */
// 57014: cancelled, by statement_timeout (a statement past DB_QUERY_TIMEOUT_MS) or an operator: retried.
// 28000/28P01/3D000: a connection refused (pg_hba, a password changed under us, the database dropped):
// an operator's fix away, like a server that is down. 55000 "not currently accepting connections" is
// told by its message (the code names other states too).
const UNAVAILABLE_SQLSTATE = /^(08...|57014|57P0[123]|53300|53400|58030)$/;
const LOGIN_REFUSED_SQLSTATE = /^(28000|28P01|3D000)$/;
const UNAVAILABLE_ERRNO = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNABORTED',
]);
const UNAVAILABLE_MESSAGE =
  /Connection terminated|Query read timeout|timeout exceeded when trying to connect|connection error and is not queryable|Client was closed and is not queryable|the database system is (starting up|shutting down|in recovery mode)|is not currently accepting connections/i;

/**
 * The database a command-line tool works on: DATABASE_URL, or the embedded database of a running
 * `npm start` (which records where it listens in .data/runtime.json).
 */
export function cliDatabaseUrl(): string {
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  // The data directory of `npm start` (SB_DATA_DIR moves it, as it does for the start script).
  const runtime = join(process.env.SB_DATA_DIR || '.data', 'runtime.json');
  // An `npm start` killed outright leaves its file behind: its address would only be refused.
  const recorded = existsSync(runtime) ? (JSON.parse(readFileSync(runtime, 'utf8')) as { DATABASE_URL: string; pid?: number }) : undefined;
  if (recorded && (recorded.pid === undefined || processAlive(recorded.pid))) return recorded.DATABASE_URL;
  throw new Error(`DATABASE_URL is not set and no running 'npm start' was found (${runtime})`);
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * True when `err` says the database cannot be reached or dropped the connection (server down,
 * restarting, refusing connections, too many clients, a statement prepared before a migration): a 503
 * to retry, never a 500, never a crash.
 */
export function isDbUnavailable(err: unknown, depth = 0): boolean {
  if (!err || typeof err !== 'object' || depth > 4) return false;
  const e = err as { code?: unknown; message?: unknown; cause?: unknown; errors?: unknown };
  if (typeof e.code === 'string' && (UNAVAILABLE_SQLSTATE.test(e.code) || LOGIN_REFUSED_SQLSTATE.test(e.code) || UNAVAILABLE_ERRNO.has(e.code))) return true;
  // Its connection is dropped (with the stale statement) and the work tried again, as after an outage.
  if (isStalePlan(err)) return true;
  if (typeof e.message === 'string' && UNAVAILABLE_MESSAGE.test(e.message)) return true;
  // Node's connect to "localhost" tries every address and reports an AggregateError.
  if (Array.isArray(e.errors) && e.errors.some((x) => isDbUnavailable(x, depth + 1))) return true;
  return isDbUnavailable(e.cause, depth + 1);
}

/**
 * A login refused (password, pg_hba) or a database that does not exist: a setting to fix, said as such
 * (naming DATABASE_URL) but waited on like an outage, at start too: on Kubernetes the role's new
 * password or the database often arrives after the pod started, and the service then comes up by itself.
 */
function loginRefused(err: unknown, depth = 0): boolean {
  if (!err || typeof err !== 'object' || depth > 4) return false;
  const e = err as { code?: unknown; cause?: unknown };
  return (typeof e.code === 'string' && LOGIN_REFUSED_SQLSTATE.test(e.code)) || loginRefused(e.cause, depth + 1);
}

/**
 * A client taken out of the pool with an 'error' listener for as long as it is out: a connection that
 * breaks meanwhile (database restart) emits 'error', which without a listener would end the process.
 * `done` gives it back, destroyed when it broke, failed with a connection error, or `destroy` says so.
 */
async function checkout(pool: pg.Pool): Promise<{ client: pg.PoolClient; done: (err?: unknown, destroy?: boolean) => void }> {
  const client = await pool.connect();
  let broken: Error | undefined;
  const onError = (err: Error) => {
    broken ??= err;
  };
  client.on('error', onError);
  return {
    client,
    done(err, destroy = false) {
      if (!broken && (destroy || isDbUnavailable(err))) broken = err instanceof Error ? err : new Error('connection in an unknown state');
      client.removeListener('error', onError);
      client.release(broken ?? undefined);
    },
  };
}

let settingWarned = false;
/**
 * The session settings of a new connection. One the server refuses (plan_cache_mode before PostgreSQL
 * 12) is said once per process and the connection used as it is; a connection that does not answer is
 * not handed out (pg-pool ends it and the caller gets the error).
 */
async function setUpSession(client: pg.ClientBase, settings: string[], timeoutMs: number): Promise<void> {
  for (const text of settings) {
    try {
      await client.query({ text, query_timeout: timeoutMs } as pg.QueryConfig);
    } catch (err) {
      if (isDbUnavailable(err)) throw err;
      if (settingWarned) continue;
      settingWarned = true;
      process.emitWarning(`${text} was refused (${(err as Error).message}); the connection is used without it`);
    }
  }
}

/**
 * A lock on `name` (and a `key` within it) held until the transaction ends: PostgreSQL's advisory locks,
 * which write no row. A shared one waits only for exclusive ones.
 */
export async function lockUntilCommit(tx: Queryable, name: string, key?: string, shared = false): Promise<void> {
  const fn = shared ? 'pg_advisory_xact_lock_shared' : 'pg_advisory_xact_lock';
  if (key === undefined) await tx.query(`SELECT ${fn}(hashtext($1))`, [name]);
  else await tx.query(`SELECT ${fn}(hashtext($1), hashtext($2))`, [name, key]);
}

/** The database settings of `commonConfig`, which every process reads the same way. */
export type DbSettings = Pick<
  z.infer<z.ZodObject<typeof commonConfig>>,
  'DATABASE_URL' | 'DB_POOL_MAX' | 'DB_PREPARED_STATEMENTS' | 'DB_KEY_LOOKUP_POOL' | 'DB_QUERY_TIMEOUT_MS'
>;

/** A process's database from its settings; `applicationName` names its connections in pg_stat_activity. */
export function configuredDb(config: DbSettings, applicationName: string): Db {
  return createDb(config.DATABASE_URL, {
    max: config.DB_POOL_MAX,
    applicationName,
    preparedStatements: config.DB_PREPARED_STATEMENTS,
    keyLookupPool: config.DB_KEY_LOOKUP_POOL,
    queryTimeoutMs: config.DB_QUERY_TIMEOUT_MS,
  });
}

/**
 * `preparedStatements: false` for a connection pooler that hands each transaction another server
 * connection without tracking prepared statements (PgBouncer in transaction mode before 1.21);
 * `keyLookupPool: false` behind any pooler in transaction mode (see `keyLookups`). The look-up
 * connections exist only with prepared statements on.
 */
export function createDb(
  url: string,
  opts: { max?: number; applicationName?: string; preparedStatements?: boolean; keyLookupPool?: boolean; queryTimeoutMs?: number } = {},
): Db {
  const prepared = opts.preparedStatements ?? true;
  const statementTimeoutMs = opts.queryTimeoutMs ?? 10_000;
  // The server cancels (and rolls back) a statement past the timeout, so an abandoned one does not go on
  // to commit; the driver's own wait, a little longer, covers a server that answers nothing at all.
  const timeoutMs = statementTimeoutMs + 2000;
  /** Transaction control, bounded like every statement: a COMMIT the database never answers is a 503. */
  const control = (client: pg.PoolClient, text: string) => client.query({ text, query_timeout: timeoutMs } as pg.QueryConfig);
  const timeoutSetting = `SET statement_timeout = ${Math.floor(statementTimeoutMs)}`;
  const max = opts.max ?? 10;
  const makePool = (settings: string[], size: number, recycle?: { maxUses: number; maxLifetimeSeconds: number }) => {
    const made = new pg.Pool({
      connectionString: url,
      max: size,
      ...recycle,
      application_name: opts.applicationName,
      connectionTimeoutMillis: 5000,
      // A peer that vanished without closing the socket is noticed instead of waited on.
      keepAlive: true,
      // pg-pool awaits the session settings before handing the connection out.
      onConnect: (client) => setUpSession(client, settings, timeoutMs),
    });
    // An idle client losing its connection (database restart) must not crash the process.
    made.on('error', () => undefined);
    return made;
  };
  // plan_cache_mode: a named statement is parsed once per connection but still planned for its values
  // (PostgreSQL's generic plan, made after five runs from the table as it was then, read a wallet's whole
  // payments through the wrong index once the table had grown). Behind a pooler in transaction mode a
  // session SET does not stay with this client: there the role carries plan_cache_mode
  // (scripts/db-roles.mjs), and DB_KEY_LOOKUP_POOL=0 keeps key look-ups on this pool (their setting
  // would stay on the server connection for other clients' transactions).
  const pool = makePool([timeoutSetting, ...(prepared ? ['SET plan_cache_mode = force_custom_plan'] : [])], max);
  // Key look-ups outside a transaction, on connections of their own, opened once such a look-up runs (as
  // many: with half as many the look-ups of a busy `GET` waited for a connection with a core idle).
  // Switching one connection's mode per statement would cost a round trip at each switch, more than the
  // planning it saves.
  const keyed =
    prepared && (opts.keyLookupPool ?? true)
      ? makePool([timeoutSetting, 'SET plan_cache_mode = force_generic_plan'], max, { maxUses: KEY_LOOKUP_USES, maxLifetimeSeconds: KEY_LOOKUP_SECONDS })
      : undefined;
  const q = traced(pool, prepared, timeoutMs);
  const k = keyed && traced(keyed, prepared, timeoutMs);
  return {
    pool,
    query: (text, values) => (k && values !== undefined && keyLookups.has(text) ? k : q).query(text, values),
    async tx(fn) {
      for (let attempt = 1; ; attempt++) {
        const { client, done } = await checkout(pool);
        let begun = false;
        let failure: unknown;
        let unknownState = false;
        try {
          await control(client, 'BEGIN');
          begun = true;
          const result = await fn(traced(client, prepared, timeoutMs));
          assertCallerWaits();
          await control(client, 'COMMIT');
          return result;
        } catch (err) {
          failure = err;
          // A connection whose ROLLBACK failed is in no known state: it is not given back to the pool.
          if (!isDbUnavailable(err)) await control(client, 'ROLLBACK').catch(() => (unknownState = true));
          // A pooled connection that died while idle fails at BEGIN, before anything was done: once
          // more on a fresh one. Later failures are reported (the caller's work may have reached COMMIT).
          if (!begun && attempt === 1 && isDbUnavailable(err)) continue;
          throw err;
        } finally {
          done(failure, unknownState);
        }
      }
    },
    async ping() {
      try {
        // Bounded by the driver too, so that probes of a hung database do not pile up on the pool.
        return await Promise.race([
          pool.query({ text: 'SELECT 1', query_timeout: 2000 } as pg.QueryConfig).then(() => true),
          new Promise<boolean>((r) => setTimeout(() => r(false), 2000).unref()),
        ]);
      } catch {
        return false;
      }
    },
    close: async () => {
      await Promise.all([pool.end(), keyed?.end()]);
    },
  };
}

export interface Migration {
  id: number;
  name: string;
  sql: string;
  /**
   * An older version still reads and writes correctly after it (an index, a column it ignores with a
   * default): a rollback past it is allowed. Without it, an older version refuses the database.
   */
  compatible?: true;
}

/**
 * Applies the service's numbered migrations to its own schema, once, in order. An advisory lock keyed
 * on the schema lets several replicas start at the same time.
 */
export async function migrate(db: Db, schema: string, migrations: Migration[]): Promise<number[]> {
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`bad schema name ${schema}`);
  const { client, done } = await checkout(db.pool);
  const applied: number[] = [];
  let failure: unknown;
  try {
    // Migrations (and waiting for another replica's) may take long: no statement timeout meanwhile.
    await client.query('SET statement_timeout = 0');
    await client.query('SELECT pg_advisory_lock(hashtext($1))', [`migrate:${schema}`]);
    // A service's own role may lack CREATE on the database (its schema is provisioned for it): create only when missing.
    await client.query(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '${schema}') THEN CREATE SCHEMA ${schema}; END IF; END $$`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${schema}.schema_migrations (id INT PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
    );
    await client.query(`ALTER TABLE ${schema}.schema_migrations ADD COLUMN IF NOT EXISTS compatible BOOLEAN NOT NULL DEFAULT false`);
    const rows = (await client.query<{ id: number; compatible: boolean }>(`SELECT id, compatible FROM ${schema}.schema_migrations`)).rows;
    const done = new Set(rows.map((r) => r.id));
    // A database a newer version migrated: this version would read and write rows whose meaning changed
    // (found from outside: an old billing gave re-anchored periods two months for one payment).
    const known = new Set(migrations.map((m) => m.id));
    const unknown = rows
      .filter((r) => !known.has(r.id) && !r.compatible)
      .map((r) => r.id)
      .sort((a, b) => a - b);
    if (unknown.length) {
      throw new Error(
        `${schema}: the database was migrated by a newer version (migration ${unknown.join(', ')}, unknown to this one). Start that version or a later one: downgrades are not supported.`,
      );
    }
    for (const m of [...migrations].sort((a, b) => a.id - b.id)) {
      if (done.has(m.id)) continue;
      await client.query('BEGIN');
      try {
        await client.query(`SET LOCAL search_path TO ${schema}`);
        await client.query(m.sql);
        await client.query(`INSERT INTO ${schema}.schema_migrations (id, name, compatible) VALUES ($1, $2, $3)`, [m.id, m.name, m.compatible === true]);
        await client.query('COMMIT');
        applied.push(m.id);
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw new Error(`migration ${schema} #${m.id} ${m.name} failed: ${(err as Error).message}`, { cause: err });
      }
    }
  } catch (err) {
    failure = err;
    throw err;
  } finally {
    if (!isDbUnavailable(failure)) await client.query('SELECT pg_advisory_unlock(hashtext($1))', [`migrate:${schema}`]).catch(() => undefined);
    // Not given back to the pool without its statement timeout.
    done(failure, true);
  }
  return applied;
}

/**
 * `migrate` that waits for the database, through `keepTrying` as the bus listeners do (each kind of
 * failure logged once), so a service started during an outage comes up when the database does. Two
 * paces: while the database cannot be reached, 0.25 s doubling to `maxDelayMs`; while it refuses the
 * login, 1 s doubling to 30 s (each try is a failed login in the server's log), said as a setting to fix
 * naming DATABASE_URL. Any other failure (a broken migration) is thrown.
 */
export async function migrateWhenReachable(db: Db, schema: string, migrations: Migration[], log: Warns, maxDelayMs = 2000): Promise<number[]> {
  const logged = new Set<string>();
  const whileUnreachable = () =>
    keepTrying('database not reachable, migrations wait', () => migrate(db, schema, migrations), {
      log,
      logged,
      firstMs: 250,
      maxMs: maxDelayMs,
      fatal: (err) => !isDbUnavailable(err) || loginRefused(err),
    });
  return keepTrying('DATABASE_URL refused', whileUnreachable, {
    log,
    logged,
    firstMs: 1000,
    maxMs: 30_000,
    fatal: (err) => !loginRefused(err),
    say: (err) => `DATABASE_URL refused: ${(err as Error).message}; retrying (fix its role, password or database)`,
  });
}
