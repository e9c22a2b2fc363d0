// One PostgreSQL role per service, owning its schema and nothing else: a service connected as its role
// cannot read another service's tables (it has no USAGE on their schemas). Used by the test stack,
// `npm start` with a DATABASE_URL, and `npm run db-roles` (any PostgreSQL >= 15 reached as a superuser or a
// role with CREATEROLE that owns the database). On Kubernetes the prod overlay declares the same roles in
// its CloudNativePG Cluster and the schemas in its bootstrap SQL (deploy/k8s/overlays/prod/postgres.yaml).
//
//   DATABASE_URL=postgres://postgres@host/db node scripts/db-roles.mjs [--prefix sb_]
//   prints one DATABASE_URL per service (new passwords each run; the old ones stop working)
import { createHash, randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

export const DB_SERVICES = ['gateway', 'billing', 'payments', 'nwc', 'notifier'];

/**
 * Creates (or updates) each service's role with a fresh password and hands it its schema, existing tables
 * and sequences included (a database migrated before roles existed is taken over). Returns each service's
 * connection URL.
 */
export async function provisionDbRoles(adminUrl, { prefix = 'sb_' } = {}) {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const urls = {};
  try {
    const dbName = (await admin.query('SELECT current_database() AS d')).rows[0].d;
    for (const service of DB_SERVICES) {
      const role = `${prefix}${service}`;
      const password = randomBytes(18).toString('base64url');
      const r = admin.escapeIdentifier(role);
      const exists = (await admin.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role])).rowCount;
      await admin.query(
        `${exists ? 'ALTER' : 'CREATE'} ROLE ${r} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD ${admin.escapeLiteral(password)}`,
      );
      await admin.query(`GRANT CONNECT ON DATABASE ${admin.escapeIdentifier(dbName)} TO ${r}`);
      // Named statements planned for their values (see the README's Decisions) on every connection of the
      // role, also behind a pooler that hands one server connection to many clients.
      await admin.query(`ALTER ROLE ${r} SET plan_cache_mode = force_custom_plan`);
      // The schema and all in it in one transaction: never left half with another owner (found from
      // outside: a foreign key check then ran as an owner without USAGE on the schema).
      await admin.query('BEGIN');
      try {
        await admin.query(`CREATE SCHEMA IF NOT EXISTS ${service} AUTHORIZATION ${r}`);
        await admin.query(`ALTER SCHEMA ${service} OWNER TO ${r}`);
        await takeOver(admin, service, role, r);
        await admin.query('COMMIT');
      } catch (err) {
        await admin.query('ROLLBACK').catch(() => undefined);
        throw err;
      }
      const url = new URL(adminUrl);
      url.username = role;
      url.password = password;
      urls[service] = url.toString();
    }
  } finally {
    await admin.end();
  }
  return urls;
}

/** Hands `role` the tables, views and free-standing sequences of `schema` that another role owns. */
async function takeOver(admin, schema, role, r) {
  // A sequence of a serial or identity column goes with its table (PostgreSQL refuses to move it alone).
  const owned = await admin.query(
    `SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'S', 'v', 'm') AND pg_get_userbyid(c.relowner) <> $2
        AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
      ORDER BY c.relkind = 'S', c.relname`,
    [schema, role],
  );
  for (const t of owned.rows) {
    const kind = t.relkind === 'S' ? 'SEQUENCE' : t.relkind === 'v' ? 'VIEW' : t.relkind === 'm' ? 'MATERIALIZED VIEW' : 'TABLE';
    await admin.query(`ALTER ${kind} ${schema}.${admin.escapeIdentifier(t.relname)} OWNER TO ${r}`);
  }
}

/**
 * `sb_<database>_`: the role prefix of one database's services (roles are shared by every database of a
 * server). Kept within PostgreSQL's 63 bytes with the longest service name.
 */
export function dbRolePrefix(databaseUrl) {
  const db = decodeURIComponent(new URL(databaseUrl).pathname.slice(1)) || 'postgres';
  const plain = db.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  // Names that only read alike here ("shop-a", "Shop_A") keep roles of their own: a hash of the exact name.
  const tag = plain === db ? '' : `_${createHash('sha256').update(db).digest('hex').slice(0, 8)}`;
  return `sb_${plain.slice(0, 63 - 'sb__'.length - 'payments'.length - tag.length)}${tag}_`;
}

/** Drops the roles of a prefix (the test stacks' cleanup; their database is dropped first). */
export async function dropDbRoles(adminUrl, { prefix }) {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    for (const service of DB_SERVICES) await admin.query(`DROP ROLE IF EXISTS ${admin.escapeIdentifier(`${prefix}${service}`)}`);
  } finally {
    await admin.end();
  }
}

/** The env var each service's own URL is given in, next to the others (startService picks its own). */
export const dbUrlVar = (service) => `DATABASE_URL_${service.toUpperCase()}`;

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--prefix');
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error('DATABASE_URL (an administrator of the database) is required');
    process.exit(1);
  }
  const urls = await provisionDbRoles(url, { prefix: i > 0 ? process.argv[i + 1] : 'sb_' });
  for (const [service, u] of Object.entries(urls)) console.log(`${service}\t${u}`);
}
