import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { dropDbRoles, provisionDbRoles } from '../scripts/db-roles.mjs';
import { createDatabase } from './support/stack.js';

/**
 * Per-service roles taking over a database whose schemas another role owns: one made before roles
 * existed, or by `npm start` of an earlier version (roles `sb_<service>`, now `sb_<database>_<service>`).
 */
const prefixes: string[] = [];
let database: Awaited<ReturnType<typeof createDatabase>> | undefined;
afterAll(async () => {
  await database?.drop().catch(() => undefined);
  for (const prefix of prefixes)
    await dropDbRoles(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres', { prefix }).catch(() => undefined);
});

describe('db roles', () => {
  it('take over schemas with serial and identity columns from another owner, whole (found from outside: half, then 500s)', async () => {
    database = await createDatabase('sb_roles');
    const admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
    try {
      // As an older start left it: the schema and its tables (an outbox with its sequence) owned by others.
      await admin.query('CREATE SCHEMA billing');
      await admin.query('CREATE TABLE billing.outbox (seq BIGSERIAL PRIMARY KEY, body TEXT)');
      await admin.query('CREATE TABLE billing.subscribers (id TEXT PRIMARY KEY)');
      await admin.query(
        'CREATE TABLE billing.subscriptions (id TEXT PRIMARY KEY, subscriber_id TEXT REFERENCES billing.subscribers (id), n INT GENERATED ALWAYS AS IDENTITY)',
      );
      const suffix = Date.now().toString(36);
      const first = `sb_tr1${suffix}_`;
      const second = `sb_tr2${suffix}_`;
      prefixes.push(first, second);
      for (const prefix of [first, second]) {
        const urls = await provisionDbRoles(database.url, { prefix });
        const owners = await admin.query(
          `SELECT DISTINCT pg_get_userbyid(c.relowner) AS owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'billing' AND c.relkind IN ('r', 'S', 'i')`,
        );
        expect(owners.rows.map((r) => r.owner)).toEqual([`${prefix}billing`]);
        // The service's role works on its tables, foreign key checks included.
        const svc = new pg.Client({ connectionString: urls.billing });
        await svc.connect();
        try {
          const id = `sbr_${prefix}`;
          await svc.query('INSERT INTO billing.subscribers (id) VALUES ($1)', [id]);
          await svc.query('INSERT INTO billing.subscriptions (id, subscriber_id) VALUES ($1, $2)', [`sub_${prefix}`, id]);
          await svc.query(`INSERT INTO billing.outbox (body) VALUES ('x')`);
        } finally {
          await svc.end();
        }
      }
    } finally {
      await admin.end();
    }
  });
});
