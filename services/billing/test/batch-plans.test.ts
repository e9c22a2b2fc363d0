import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, migrate, type Db, type Queryable } from '@sb/runtime';
import { createDatabase } from '../../../test/support/stack.js';
import { migrations } from '../src/store/migrations.js';
import { SubscriptionsRepo } from '../src/store/subscriptions.repo.js';

/**
 * The sweep's batch statements as PostgreSQL plans them on a table of realistic size. Names of the events
 * of a batch were read with a join on an unnest: with the plans table never analyzed, planned for 200
 * rows, it read all 21,000 subscribers per batch of 100 (seen in the bench: 10 ms a batch, twice the renewal sweep's time at 10k).
 */
let db: Db;
let drop: () => Promise<void>;
const SUBSCRIBERS = 21_000;

beforeAll(async () => {
  const created = await createDatabase('sb_bp');
  drop = created.drop;
  db = createDb(created.url, { max: 2 });
  await migrate(db, 'billing', migrations);
  await db.query(`INSERT INTO billing.plans (id, wallet_id, name, amount_sats, interval, trial_days, grace_period_days,
      allow_lightning, allow_onchain, allow_nwc, allow_cardproc, allow_walletproc, created_at, updated_at)
      SELECT 'pln_' || g, 'wal_1', 'Plan ' || g, 1000, 'monthly', 0, 0, true, false, false, false, false, 1, 1 FROM generate_series(1, 3) g`);
  await db.query(
    `INSERT INTO billing.subscribers (id, wallet_id, email, name, token_hash, token_sealed, created_at)
     SELECT 'sbr_' || g, 'wal_1', 's' || g || '@example.com', CASE WHEN g % 2 = 0 THEN 'Name ' || g END, md5(g::text), 's', 1
     FROM generate_series(1, $1) g`,
    [SUBSCRIBERS],
  );
  // Statistics as autovacuum leaves them: the subscribers analyzed, a plans table of fewer than 50 rows
  // never (its threshold), so planned as PostgreSQL's default guess of its size.
  await db.query('ANALYZE billing.subscribers');
}, 60_000);
afterAll(async () => {
  await db?.close();
  await drop?.();
});

/** Runs the repository's statements on `db` and keeps them to be explained. */
function recording(into: { text: string; values?: unknown[] }[]): Queryable {
  return {
    query: (text: string, values?: unknown[]) => {
      into.push({ text, values });
      return db.query(text, values);
    },
  } as Queryable;
}

async function seqScans(statements: { text: string; values?: unknown[] }[]): Promise<string[]> {
  const scanned: string[] = [];
  const walk = (node: Record<string, unknown>) => {
    if (node['Node Type'] === 'Seq Scan') scanned.push(String(node['Relation Name']));
    for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
  };
  for (const s of statements) {
    const { rows } = await db.query(`EXPLAIN (FORMAT JSON) ${s.text}`, s.values);
    walk(rows[0]['QUERY PLAN'][0].Plan);
  }
  return scanned;
}

describe('names of a batch of events', () => {
  it('are read by index, not by reading every subscriber, and name each subscription', async () => {
    const statements: { text: string; values?: unknown[] }[] = [];
    const subs = Array.from({ length: 100 }, (_, i) => ({ plan_id: `pln_${(i % 3) + 1}`, subscriber_id: `sbr_${1000 + i}` }));
    const names = await new SubscriptionsRepo('billing').eventNamesOf(recording(statements), [
      ...subs,
      subs[0]!,
      { plan_id: 'pln_1', subscriber_id: 'sbr_none' },
    ]);

    expect(names.size).toBe(100);
    expect(names.get('pln_2/sbr_1001')).toMatchObject({ plan_name: 'Plan 2', email: 's1001@example.com', name: null });
    expect(names.get('pln_1/sbr_1000')).toMatchObject({ plan_name: 'Plan 1', email: 's1000@example.com', name: 'Name 1000' });
    expect(names.has('pln_1/sbr_none')).toBe(false);
    expect(statements.length).toBeGreaterThan(0);
    expect(await seqScans(statements)).not.toContain('subscribers');
  });
});
