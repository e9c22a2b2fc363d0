import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createDatabase } from '../../../test/support/stack.js';
import { commonConfig, loadConfig } from '../src/config.js';
import { configuredDb, createDb, isDbUnavailable, keyLookup, type Db } from '../src/db.js';

// One connection per pool, so that pg_prepared_statements (a per-session view) is read on the
// connection that ran the statements.
let url: string;
let dropDb: () => Promise<void>;
const pools: Db[] = [];
const open = (preparedStatements?: boolean) => {
  const db = createDb(url, { max: 1, preparedStatements });
  pools.push(db);
  return db;
};
const preparedTexts = async (db: Db) => (await db.query<{ statement: string }>('SELECT statement FROM pg_prepared_statements')).rows.map((r) => r.statement);

const warned = vi.spyOn(process, 'emitWarning');

beforeAll(async () => {
  const created = await createDatabase('sb_prep');
  url = created.url;
  dropDb = created.drop;
  const db = open();
  await db.query('CREATE TABLE items (id INT PRIMARY KEY, name TEXT NOT NULL)');
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
  await dropDb?.();
});

describe('named statements', () => {
  it("a new connection is handed out after its plan setting, never with a query queued behind it (pg's deprecated concurrent use)", async () => {
    const db = createDb(url, { max: 8 });
    pools.push(db);
    const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => db.query<{ n: number }>('SELECT $1::int AS n', [i])));
    expect(answers.map((r) => r.rows[0]!.n)).toEqual(Array.from({ length: 24 }, (_, i) => i));
    await Promise.all(Array.from({ length: 8 }, () => db.tx((q) => q.query('SELECT 1'))));
    // pg says it once per process: counted from the file's first connection on.
    expect(warned.mock.calls.map((c) => String(c[0]))).toEqual([]);
  });

  it('are planned for their values each time: a lookup named on an empty table keeps its unique index as the table grows', async () => {
    // The shape of payments: a unique (wallet, key) lookup beside a (wallet, created) index. A generic plan
    // made while the table was empty read the whole wallet through the second index on every later call.
    const setup = open(false);
    await setup.query(
      `CREATE TABLE pays (id TEXT PRIMARY KEY, wallet TEXT NOT NULL, sub TEXT NOT NULL, a TEXT, b TEXT, c TEXT, d BIGINT, e TEXT,
         key TEXT NOT NULL, created BIGINT NOT NULL, UNIQUE (wallet, key))`,
    );
    await setup.query('CREATE INDEX pays_by_wallet ON pays (wallet, created DESC, id DESC)');
    const db = open();
    const lookup = 'SELECT id FROM pays WHERE wallet = $1 AND key = $2';
    for (let i = 0; i < 10; i++) expect((await db.query(lookup, ['w', `k${i}`])).rows).toEqual([]);
    await setup.query(`INSERT INTO pays (id, wallet, sub, key, created) SELECT 'p' || g, 'w', 's' || g, 'k' || g, g FROM generate_series(1, 20000) g`);
    const read = async () =>
      (await setup.query<{ n: string }>(`SELECT coalesce(sum(idx_tup_read), 0)::text AS n FROM pg_stat_user_indexes WHERE indexrelname = 'pays_by_wallet'`))
        .rows[0]!.n;
    const before = Number(await read());
    for (let i = 0; i < 20; i++) expect((await db.query(lookup, ['w', `k${i + 1}`])).rows).toEqual([{ id: `p${i + 1}` }]);
    expect(await preparedTexts(db)).toContain(lookup);
    expect((await db.query<{ plan_cache_mode: string }>('SHOW plan_cache_mode')).rows[0]!.plan_cache_mode).toBe('force_custom_plan');
    // Index statistics reach the view when a backend reports them (at most once a second).
    await new Promise((r) => setTimeout(r, 1500));
    await db.query('SELECT 1');
    expect(Number(await read()) - before).toBeLessThan(100);
  });

  it('key look-ups outside a transaction keep one generic plan; inside one, and every other statement, are planned each time', async () => {
    const db = open();
    await db.query('CREATE TABLE names (id INT PRIMARY KEY, name TEXT NOT NULL)');
    const lookup = keyLookup('SELECT name FROM names WHERE id = $1 AND $2::int >= 0');
    // Marked too, so that it runs on the look-ups' own connection (one, as the pool has one): the view is per session.
    const plans = keyLookup('SELECT generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE statement = $1');
    await db.query('INSERT INTO names (id, name) VALUES (100, $1)', ['keyed']);
    for (let i = 0; i < 8; i++) expect((await db.query(lookup, [100, i])).rows).toEqual([{ name: 'keyed' }]);
    expect((await db.query(plans, [lookup])).rows).toEqual([{ generic: 6, custom: 0 }]);
    expect((await db.query<{ plan_cache_mode: string }>('SHOW plan_cache_mode')).rows[0]!.plan_cache_mode).toBe('force_custom_plan');
    const inTx = await db.tx(async (q) => {
      for (let i = 0; i < 8; i++) expect((await q.query(lookup, [100, i])).rows).toEqual([{ name: 'keyed' }]);
      return (await q.query(plans, [lookup])).rows;
    });
    expect(inTx).toEqual([{ generic: 0, custom: 8 }]);

    // Behind a pooler in transaction mode (DB_KEY_LOOKUP_POOL=0) they stay with the rest, planned each time.
    const pooled = createDb(url, { max: 1, keyLookupPool: false });
    pools.push(pooled);
    for (let i = 0; i < 8; i++) expect((await pooled.query(lookup, [100, i])).rows).toEqual([{ name: 'keyed' }]);
    // Named in this process already: prepared on this connection from its first run.
    expect((await pooled.query(plans, [lookup])).rows).toEqual([{ generic: 0, custom: 8 }]);
  });

  it('DB_KEY_LOOKUP_POOL, as every process reads it, decides where key look-ups run', async () => {
    const db = open();
    await db.query('CREATE TABLE settings_test (id INT PRIMARY KEY, name TEXT NOT NULL)');
    await db.query(`INSERT INTO settings_test VALUES (1, 'one')`);
    const lookup = keyLookup('SELECT name FROM settings_test WHERE id = $1 AND $2::int >= 0');
    const plans = keyLookup('SELECT generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE statement = $1');
    const planned = async (env: Record<string, string>) => {
      const configured = configuredDb(loadConfig(commonConfig, { DATABASE_URL: url, DB_POOL_MAX: '1', ...env }), 'settings-test');
      pools.push(configured);
      for (let i = 0; i < 8; i++) expect((await configured.query(lookup, [1, i])).rows).toEqual([{ name: 'one' }]);
      return (await configured.query(plans, [lookup])).rows;
    };
    expect(await planned({})).toEqual([{ generic: 6, custom: 0 }]);
    // DB_POOL_MAX bounds each pool, under the process's name.
    const sized = configuredDb(loadConfig(commonConfig, { DATABASE_URL: url, DB_POOL_MAX: '3' }), 'settings-test-sized');
    pools.push(sized);
    await Promise.all(Array.from({ length: 9 }, () => sized.query('SELECT pg_sleep(0.2)')));
    const named = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'settings-test-sized'`);
    expect(named.rows[0]!.n).toBe(3);
    expect(await planned({ DB_KEY_LOOKUP_POOL: '0' })).toEqual([{ generic: 0, custom: 8 }]);
    expect(await planned({ DB_KEY_LOOKUP_POOL: 'false' })).toEqual([{ generic: 0, custom: 8 }]);
    // Without prepared statements there are no named plans at all, look-up pool or not.
    expect(await planned({ DB_PREPARED_STATEMENTS: '0' })).toEqual([]);
  });

  it("a key look-up's connection is replaced after 1,000 of them: a plan made on a one-page table is made again as it grows", async () => {
    // At a page or two a scan of the table (or of another index holding the key) costs what the key's
    // index does, and a generic plan made then would read the whole table on every call once it grew.
    const setup = open(false);
    // Autovacuum would analyse the grown table and so have the plan made again: this test is of the time before.
    await setup.query('CREATE TABLE keyed (id TEXT PRIMARY KEY, wallet TEXT NOT NULL, created BIGINT NOT NULL, pad TEXT) WITH (autovacuum_enabled = false)');
    await setup.query('CREATE INDEX keyed_by_wallet ON keyed (wallet, created DESC, id DESC)');
    await setup.query(`INSERT INTO keyed VALUES ('k0', 'w', 0, 'x')`);
    await setup.query('ANALYZE keyed');
    const db = open();
    const lookup = keyLookup('SELECT id, pg_backend_pid() AS pid FROM keyed WHERE id = $1');
    let uses = 0;
    const look = async (id: string) => {
      uses++;
      const { rows } = await db.query<{ id: string; pid: number }>(lookup, [id]);
      expect(rows[0]!.id).toBe(id);
      return rows[0]!.pid;
    };
    const first = await look('k0');
    for (let i = 0; i < 10; i++) expect(await look('k0')).toBe(first);
    await setup.query(`INSERT INTO keyed SELECT 'k' || g, 'w', g, repeat('x', 100) FROM generate_series(1, 20000) g`);
    const stats = async () =>
      (
        await setup.query<{ n: string }>(
          `SELECT (coalesce(seq_tup_read, 0) + coalesce((SELECT sum(idx_tup_read) FROM pg_stat_user_indexes i
             WHERE i.relid = t.relid AND indexrelname <> 'keyed_pkey'), 0))::text AS n FROM pg_stat_user_tables t WHERE relname = 'keyed'`,
        )
      ).rows[0]!.n;
    const readPerLookup = async (from: number, n: number) => {
      const before = Number(await stats());
      const pids = new Set<number>();
      for (let i = 0; i < n; i++) pids.add(await look(`k${from + i}`));
      // Table statistics reach the view when a backend reports them (at most once a second).
      await new Promise((r) => setTimeout(r, 1500));
      await look('k0');
      return { read: (Number(await stats()) - before) / n, pids };
    };
    // The plan of the one-page table, still in use: a whole scan per look-up.
    const stale = await readPerLookup(1, 20);
    expect(stale.pids).toEqual(new Set([first]));
    expect(stale.read).toBeGreaterThan(1000);
    // Its 1,000th use is its last: the next look-up runs on a new connection, whose plan is the key's index.
    while (uses < 1000) expect(await look('k0')).toBe(first);
    // Its statistics are reported when it ends: counted before the fresh connection's.
    for (let i = 0; i < 100; i++) {
      const { rows } = await setup.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [first]);
      if (!rows.length) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const fresh = await readPerLookup(100, 50);
    expect(fresh.pids.has(first)).toBe(false);
    expect(fresh.pids.size).toBe(1);
    expect(fresh.read).toBeLessThan(1);
  });

  it('a statement run a third time is prepared on the connection and still answers', async () => {
    const db = open();
    const text = 'SELECT $1::int + 1 AS n';
    for (let i = 0; i < 2; i++) expect((await db.query(text, [i])).rows[0].n).toBe(i + 1);
    expect(await preparedTexts(db)).not.toContain(text);
    for (let i = 2; i < 6; i++) expect((await db.query(text, [i])).rows[0].n).toBe(i + 1);
    expect(await preparedTexts(db)).toContain(text);
  });

  it('statements without parameters and pools with the switch off prepare nothing', async () => {
    const off = open(false);
    for (let i = 0; i < 5; i++) await off.query('SELECT $1::text AS v', [`x${i}`]);
    for (let i = 0; i < 5; i++) await off.query('SELECT 42 AS v');
    expect(await preparedTexts(off)).toEqual([]);
    const on = open();
    for (let i = 0; i < 5; i++) await on.query('SELECT 43 AS v');
    expect(await preparedTexts(on)).toEqual([]);
  });

  it('a prepared statement that fails rolls its transaction back and runs again afterwards', async () => {
    const db = open();
    const insert = 'INSERT INTO items (id, name) VALUES ($1, $2)';
    for (let i = 1; i <= 3; i++) await db.tx((q) => q.query(insert, [i, `n${i}`]));
    expect(await preparedTexts(db)).toContain(insert);
    await expect(
      db.tx(async (q) => {
        await q.query(insert, [10, 'kept?']);
        await q.query(insert, [1, 'duplicate']);
      }),
    ).rejects.toMatchObject({ code: '23505' });
    await db.tx((q) => q.query(insert, [11, 'after']));
    const { rows } = await db.query<{ id: number }>('SELECT id FROM items ORDER BY id');
    expect(rows.map((r) => r.id)).toEqual([1, 2, 3, 11]);
  });

  it('a statement whose result changed type in a migration is run afresh, and fails a transaction as retryable', async () => {
    const db = open();
    const select = 'SELECT id, name FROM items WHERE id = $1';
    for (let i = 0; i < 4; i++) await db.query(select, [1]);
    expect(await preparedTexts(db)).toContain(select);
    await db.query('ALTER TABLE items ADD COLUMN note TEXT');
    await db.query('ALTER TABLE items ALTER COLUMN name TYPE varchar(100)');
    expect((await db.query(select, [1])).rows).toEqual([{ id: 1, name: 'n1' }]);

    // Inside a transaction the statement cannot be run again: the connection is dropped and the
    // caller told to try again (a 503, an event redelivered), which then succeeds.
    const tx = open();
    const byName = 'SELECT name FROM items WHERE id = $1';
    for (let i = 0; i < 4; i++) await tx.tx((q) => q.query(byName, [2]));
    await tx.query('ALTER TABLE items ALTER COLUMN name TYPE varchar(200)');
    const failure = await tx.tx((q) => q.query(byName, [2])).catch((err: unknown) => err);
    expect(isDbUnavailable(failure)).toBe(true);
    expect((await tx.tx((q) => q.query(byName, [2]))).rows).toEqual([{ name: 'n2' }]);
  });

  it('names at most 300 texts per process; the rest run unnamed and answer alike', async () => {
    const db = open();
    for (let n = 0; n < 320; n++) {
      const text = `SELECT $1::int * ${n} AS v`;
      for (let i = 0; i < 3; i++) expect((await db.query(text, [2])).rows[0].v).toBe(2 * n);
    }
    const prepared = await preparedTexts(db);
    expect(prepared.length).toBeGreaterThan(200);
    expect(prepared.length).toBeLessThanOrEqual(300);
    expect(prepared).not.toContain('SELECT $1::int * 319 AS v');
  });
});
