import pg from 'pg';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { tracer } from './telemetry.js';

// BIGINT columns hold satoshi amounts and Unix seconds, both far below 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

export interface Queryable {
  query<R extends pg.QueryResultRow = any>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
}

export interface Db extends Queryable {
  pool: pg.Pool;
  tx<T>(fn: (client: Queryable) => Promise<T>): Promise<T>;
  ping(): Promise<boolean>;
  close(): Promise<void>;
}

function traced(q: Queryable, system = 'postgresql'): Queryable {
  return {
    query(text, values) {
      const operation = text.trimStart().split(/\s/, 1)[0]?.toUpperCase() ?? 'SQL';
      return tracer().startActiveSpan(
        `db ${operation}`,
        { kind: SpanKind.CLIENT, attributes: { 'db.system': system, 'db.statement': text } },
        async (span) => {
          try {
            return await q.query(text, values);
          } catch (err) {
            span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
            throw err;
          } finally {
            span.end();
          }
        },
      );
    },
  };
}

export function createDb(url: string, opts: { max?: number; applicationName?: string } = {}): Db {
  const pool = new pg.Pool({
    connectionString: url,
    max: opts.max ?? 10,
    application_name: opts.applicationName,
    connectionTimeoutMillis: 5000,
  });
  // An idle client losing its connection (database restart) must not crash the process.
  pool.on('error', () => undefined);
  const q = traced(pool);
  return {
    pool,
    query: q.query,
    async tx(fn) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await fn(traced(client));
        await client.query('COMMIT');
        return result;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw err;
      } finally {
        client.release();
      }
    },
    async ping() {
      try {
        await pool.query('SELECT 1');
        return true;
      } catch {
        return false;
      }
    },
    close: () => pool.end(),
  };
}

export interface Migration {
  id: number;
  name: string;
  sql: string;
}

/**
 * Applies the service's numbered migrations to its own schema, once, in order. An advisory lock keyed
 * on the schema lets several replicas start at the same time.
 */
export async function migrate(db: Db, schema: string, migrations: Migration[]): Promise<number[]> {
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`bad schema name ${schema}`);
  const client = await db.pool.connect();
  const applied: number[] = [];
  try {
    await client.query('SELECT pg_advisory_lock(hashtext($1))', [`migrate:${schema}`]);
    // A service's own role may lack CREATE on the database (its schema is provisioned for it): create only when missing.
    await client.query(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '${schema}') THEN CREATE SCHEMA ${schema}; END IF; END $$`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${schema}.schema_migrations (id INT PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
    );
    const done = new Set(
      (await client.query<{ id: number }>(`SELECT id FROM ${schema}.schema_migrations`)).rows.map((r) => r.id),
    );
    for (const m of [...migrations].sort((a, b) => a.id - b.id)) {
      if (done.has(m.id)) continue;
      await client.query('BEGIN');
      try {
        await client.query(`SET LOCAL search_path TO ${schema}`);
        await client.query(m.sql);
        await client.query(`INSERT INTO ${schema}.schema_migrations (id, name) VALUES ($1, $2)`, [m.id, m.name]);
        await client.query('COMMIT');
        applied.push(m.id);
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${schema} #${m.id} ${m.name} failed: ${(err as Error).message}`);
      }
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock(hashtext($1))', [`migrate:${schema}`]).catch(() => undefined);
    client.release();
  }
  return applied;
}
