// Re-seals the stored secrets with the current SECRETS_KEY after a rotation (see SecretBox):
//   SECRETS_KEY=<new> SECRETS_KEY_PREVIOUS=<old> DATABASE_URL=... node libs/runtime/dist/cli/reseal.js [--only billing,nwc]
// On Kubernetes, run it in each service's pod (its own role reaches its own schema only):
//   kubectl exec deploy/billing -- node libs/runtime/dist/cli/reseal.js --only billing
// Prints how many values each table had re-sealed; running it again re-seals nothing.
import pg from 'pg';
import { SecretBox } from '../secrets.js';

/** Every column holding a SecretBox value, by the service owning it. */
export const SEALED_COLUMNS = [
  { service: 'billing', table: 'billing.subscribers', column: 'token_sealed' },
  { service: 'nwc', table: 'nwc.connections', column: 'secret_sealed' },
  { service: 'notifier', table: 'notifier.endpoints', column: 'secret_sealed' },
] as const;

const BATCH = 200;

export async function reseal(db: pg.Pool, box: SecretBox, services?: string[]): Promise<Record<string, number>> {
  const done: Record<string, number> = {};
  for (const { service, table, column } of SEALED_COLUMNS) {
    if (services && !services.includes(service)) continue;
    let n = 0;
    for (;;) {
      // Batches in their own transactions, rows locked while re-sealed: the running services go on.
      const moved = await db.connect().then(async (c) => {
        try {
          await c.query('BEGIN');
          const { rows } = await c.query<{ id: string; sealed: string }>(
            `SELECT id, ${column} AS sealed FROM ${table} WHERE ${column} IS NOT NULL AND ${column} NOT LIKE $1 LIMIT ${BATCH} FOR UPDATE SKIP LOCKED`,
            [`${box.keyId}.%`],
          );
          for (const r of rows) await c.query(`UPDATE ${table} SET ${column} = $2 WHERE id = $1`, [r.id, box.seal(box.open(r.sealed))]);
          await c.query('COMMIT');
          return rows.length;
        } catch (err) {
          await c.query('ROLLBACK').catch(() => undefined);
          throw err;
        } finally {
          c.release();
        }
      });
      n += moved;
      if (moved < BATCH) break;
    }
    done[table] = n;
  }
  return done;
}

async function main(): Promise<void> {
  const { DATABASE_URL, SECRETS_KEY, SECRETS_KEY_PREVIOUS } = process.env;
  if (!DATABASE_URL || !SECRETS_KEY) {
    process.stderr.write('DATABASE_URL and SECRETS_KEY (the new key) are required; SECRETS_KEY_PREVIOUS names the old one(s)\n');
    process.exit(1);
  }
  const i = process.argv.indexOf('--only');
  const only = i > 0 ? process.argv[i + 1]?.split(',') : undefined;
  const db = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  try {
    const done = await reseal(db, new SecretBox(SECRETS_KEY, SECRETS_KEY_PREVIOUS), only);
    process.stdout.write(`${JSON.stringify({ key_id: new SecretBox(SECRETS_KEY).keyId, resealed: done })}\n`);
  } finally {
    await db.end();
  }
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  main().catch((err) => {
    process.stderr.write(`reseal failed: ${err?.message ?? err}\n`);
    process.exit(1);
  });
}
