import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, migrate, type Db } from '@sb/runtime';
import { createDatabase } from '../../../test/support/stack.js';
import { migrations } from '../src/store/migrations.js';

/** Migrations run on rows written before them: a database at migration 6 with pending subscriptions. */
let db: Db;
let drop: () => Promise<void>;

beforeAll(async () => {
  const created = await createDatabase('sb_bm');
  drop = created.drop;
  db = createDb(created.url, { max: 2 });
});
afterAll(async () => {
  await db?.close();
  await drop?.();
});

describe('migration 7 (pending_since)', () => {
  it('takes created_at for a checkout never activated and updated_at for a resumed subscription', async () => {
    await migrate(
      db,
      'billing',
      migrations.filter((m) => m.id <= 6),
    );
    await db.query(`INSERT INTO billing.plans (id, wallet_id, name, amount_sats, interval, trial_days, grace_period_days,
      allow_lightning, allow_onchain, allow_nwc, allow_cardproc, allow_walletproc, created_at, updated_at)
      VALUES ('pln_1', 'wal_1', 'P', 1000, 'monthly', 0, 0, true, false, false, false, false, 1, 1)`);
    // One subscriber each: one live subscription per subscriber and plan.
    const row = async (id: string, status: string, periodIndex: number, trialEnd: number | null, createdAt: number, updatedAt: number) => {
      await db.query(`INSERT INTO billing.subscribers (id, wallet_id, token_hash, token_sealed, created_at) VALUES ($1, 'wal_1', $1, 's', 1)`, [`sbr_${id}`]);
      await db.query(
        `INSERT INTO billing.subscriptions (id, wallet_id, plan_id, subscriber_id, status, payment_method, amount_sats, interval, grace_period_days,
           period_anchor, period_index, current_period_start, current_period_end, trial_end, receive_confirmations, receive_reminders, created_at, updated_at)
         VALUES ($1, 'wal_1', 'pln_1', $7, $2, 'lightning', 1000, 'monthly', 0, $5, $3, $5, $5, $4, true, true, $5, $6)`,
        [id, status, periodIndex, trialEnd, createdAt, updatedAt, `sbr_${id}`],
      );
    };
    await row('sub_checkout', 'pending', 0, null, 1000, 5000); // updated later (e.g. metadata) but never paid
    await row('sub_resumed', 'pending', 3, null, 1000, 9000); // resumed after its period ended
    await row('sub_trial_resumed', 'pending', 0, 2000, 1000, 7000); // paused in its trial, resumed after it
    await row('sub_active', 'active', 1, null, 1000, 3000);
    await migrate(db, 'billing', migrations);
    const { rows } = await db.query(`SELECT id, pending_since FROM billing.subscriptions ORDER BY id`);
    expect(rows.map((r) => [r.id, r.pending_since === null ? null : Number(r.pending_since)])).toEqual([
      ['sub_active', null],
      ['sub_checkout', 1000],
      ['sub_resumed', 9000],
      ['sub_trial_resumed', 7000],
    ]);
  });
});

describe('migration 12 (anchor_index, again)', () => {
  it('adds the column to a database whose migration 11 was the early one without it, and changes nothing elsewhere', async () => {
    const created = await createDatabase('sb_bm12');
    const early = createDb(created.url, { max: 2 });
    try {
      const others = migrations.filter((m) => m.id !== 11 && m.id !== 12);
      await migrate(early, 'billing', others);
      // The early migration 11: the index only.
      await migrate(early, 'billing', [
        ...others,
        {
          id: 11,
          name: 'renewal payments by subscription',
          sql: 'CREATE INDEX renewal_payments_subscription ON renewal_payments (subscription_id, period_end);',
        },
      ]);
      const column = `SELECT count(*)::int AS n FROM information_schema.columns WHERE table_schema = 'billing' AND table_name = 'subscriptions' AND column_name = 'anchor_index'`;
      expect((await early.query(column)).rows[0].n).toBe(0);
      expect(await migrate(early, 'billing', migrations)).toEqual([12]);
      expect((await early.query(column)).rows[0].n).toBe(1);
    } finally {
      await early.close();
      await created.drop();
    }
    // The database of this file, migrated from the start: 12 runs and finds the column there.
    await migrate(db, 'billing', migrations);
    expect((await db.query(`SELECT count(*)::int AS n FROM billing.schema_migrations WHERE id = 12`)).rows[0].n).toBe(1);
  });
});
