import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../scripts/stack.mjs';
import { createDatabase } from '../../../test/support/stack.js';
import { createDb, migrate, type Db } from '../src/db.js';
import { enqueueEvent, OutboxRelay, outboxTableSql } from '../src/outbox.js';
import { systemClock } from '../src/clock.js';
import { connectNats } from '../src/nats.js';

let db: Db;
let dropDb: () => Promise<void>;
let nats: Awaited<ReturnType<typeof startNats>>;
let natsDir: string;
const log = pino({ level: 'silent' });

beforeAll(async () => {
  const created = await createDatabase('sb_rt');
  dropDb = created.drop;
  db = createDb(created.url, { max: 5 });
  natsDir = mkdtempSync(join(tmpdir(), 'sb-nats-'));
  nats = await startNats(natsDir);
});
afterAll(async () => {
  await db?.close();
  await dropDb?.();
  await nats?.stop();
  rmSync(natsDir, { recursive: true, force: true });
});

describe('migrate', () => {
  const migrations = [
    { id: 1, name: 'one', sql: 'CREATE TABLE t (id INT PRIMARY KEY)' },
    { id: 2, name: 'two', sql: 'ALTER TABLE t ADD COLUMN v TEXT' },
  ];

  it('applies numbered migrations once, also when replicas start together', async () => {
    const results = await Promise.all([migrate(db, 'm1', migrations), migrate(db, 'm1', migrations), migrate(db, 'm1', migrations)]);
    expect(results.flat().sort()).toEqual([1, 2]);
    expect(await migrate(db, 'm1', migrations)).toEqual([]);
    const cols = await db.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = 'm1' AND table_name = 't' ORDER BY 1`);
    expect(cols.rows.map((r) => r.column_name)).toEqual(['id', 'v']);
  });

  it('rolls back a failing migration whole and names it', async () => {
    await expect(migrate(db, 'm2', [{ id: 1, name: 'broken', sql: 'CREATE TABLE a (id INT); SELECT nope' }])).rejects.toThrow(/m2 #1 broken/);
    const t = await db.query(`SELECT to_regclass('m2.a') AS t`);
    expect(t.rows[0].t).toBeNull();
  });
});

describe('outbox', () => {
  beforeAll(() => migrate(db, 'ob', [{ id: 1, name: 'outbox', sql: outboxTableSql }]));

  async function streamEvents(): Promise<any[]> {
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      const info = await jsm.streams.info('EVENTS');
      const out = [];
      for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
        const m = await jsm.streams.getMessage('EVENTS', { seq }).catch(() => null);
        if (m) out.push(m.json());
      }
      return out;
    } finally {
      await nc.close();
    }
  }

  it('publishes committed events once, drops rolled-back ones, and survives a crash between publish and mark', async () => {
    const committed = await db.tx((tx) => enqueueEvent(tx, 'ob', systemClock, 'wal_1', 'plan.archived', { plan_id: 'plan_a', plan_name: 'A' }));
    await db
      .tx(async (tx) => {
        await enqueueEvent(tx, 'ob', systemClock, 'wal_1', 'plan.archived', { plan_id: 'plan_rolled_back', plan_name: 'B' });
        throw new Error('business rule failed');
      })
      .catch(() => undefined);

    const conns = await Promise.all([connectNats(nats.url, 'r1'), connectNats(nats.url, 'r2')]);
    const relays = conns.map((nc) => new OutboxRelay(db, 'ob', nc, log, { intervalMs: 50 }));
    await Promise.all(relays.map((r) => r.start()));
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      const pending = await db.query('SELECT count(*)::int AS n FROM ob.outbox WHERE published_at IS NULL');
      if (pending.rows[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    // A crash after publishing and before marking: the row is published again on restart.
    await db.query('UPDATE ob.outbox SET published_at = NULL');
    await new Promise((r) => setTimeout(r, 500));
    await Promise.all(relays.map((r) => r.stop()));
    await Promise.all(conns.map((nc) => nc.close()));

    const events = await streamEvents();
    const ids = events.map((e) => e.data.plan_id);
    expect(ids.filter((i) => i === 'plan_a')).toHaveLength(1);
    expect(ids).not.toContain('plan_rolled_back');
    expect(events.find((e) => e.data.plan_id === 'plan_a')).toEqual(committed);
    const left = await db.query('SELECT count(*)::int AS n FROM ob.outbox WHERE published_at IS NULL');
    expect(left.rows[0].n).toBe(0);
  });
});
