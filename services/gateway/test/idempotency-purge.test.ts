import { createDb, type Db, SecretBox } from '@sb/runtime';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createDatabase } from '../../../test/support/stack.js';
import { IdempotencyRepo } from '../src/store/idempotency.repo.js';

let db: Db;
let drop: () => Promise<void>;
beforeAll(async () => {
  const created = await createDatabase('sb_idem');
  drop = created.drop;
  db = createDb(created.url, { max: 1 });
  await db.query(`CREATE SCHEMA g; CREATE TABLE g.idempotency_keys (scope TEXT NOT NULL, key TEXT NOT NULL, request_hash TEXT NOT NULL,
    status_code INT, response_body JSONB, created_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (scope, key))`);
});
afterAll(async () => {
  await db?.close();
  await drop?.();
});

it('purges every key older than 24 hours in batches, and no younger one', async () => {
  await db.query(`INSERT INTO g.idempotency_keys (scope, key, request_hash, created_at)
    SELECT 'w', 'old' || i, 'h', now() - interval '25 hours' FROM generate_series(1, 23) i`);
  await db.query(`INSERT INTO g.idempotency_keys (scope, key, request_hash, created_at)
    SELECT 'w', 'young' || i, 'h', now() - interval '23 hours' FROM generate_series(1, 4) i`);
  const repo = new IdempotencyRepo('g', new SecretBox('11'.repeat(32)));
  expect(await repo.purgeExpired(db, 5)).toBe(23);
  const left = await db.query<{ key: string }>(`SELECT key FROM g.idempotency_keys ORDER BY key`);
  expect(left.rows.map((r) => r.key)).toEqual(['young1', 'young2', 'young3', 'young4']);
  expect(await repo.purgeExpired(db, 5)).toBe(0);
});
