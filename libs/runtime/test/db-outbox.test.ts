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
import { enqueueEvent, ensureEventsStream, OutboxRelay, outboxTableSql } from '../src/outbox.js';
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

  it('deletes rows on the stream for longer than the retention, oldest first; rows not on the stream stay however old', async () => {
    await migrate(db, 'obp', [{ id: 1, name: 'outbox', sql: outboxTableSql }]);
    const names = ['old', 'old unpublished', 'old too', 'recent', 'old as well', 'new'];
    for (const plan_name of names) await db.tx((tx) => enqueueEvent(tx, 'obp', systemClock, 'wal_1', 'plan.archived', { plan_id: 'plan_p', plan_name }));
    const published: Record<string, string | null> = {
      old: '8 days',
      'old unpublished': null,
      'old too': '7 days 1 minute',
      recent: '6 days 23 hours',
      'old as well': '30 days',
      new: null,
    };
    for (const [name, ago] of Object.entries(published)) {
      await db.query(
        `UPDATE obp.outbox SET published_at = now() - $2::interval, created_at = now() - interval '40 days' WHERE payload->'data'->>'plan_name' = $1`,
        [name, ago],
      );
    }
    const left = async () => (await db.query(`SELECT payload->'data'->>'plan_name' AS n FROM obp.outbox ORDER BY seq`)).rows.map((r) => r.n);
    const nc = await connectNats(nats.url, 'pruner');
    try {
      const relay = new OutboxRelay(db, 'obp', nc, log, { retentionDays: 7, pruneIntervalMs: 50 });
      const seqs = (await db.query('SELECT seq FROM obp.outbox ORDER BY seq')).rows.map((r) => Number(r.seq));
      // Among the two oldest rows: the published one goes, the unpublished one stays; more may follow.
      expect(await relay.prune(2)).toEqual({ deleted: 1, last: seqs[1], more: true });
      expect(await left()).toEqual(['old unpublished', 'old too', 'recent', 'old as well', 'new']);
      // From a row on: the window starts after it. A row published too recently ends the round.
      expect(await relay.prune(1, seqs[2])).toEqual({ deleted: 0, last: seqs[3], more: false });
      expect(await relay.prune(2, seqs[1])).toEqual({ deleted: 1, last: seqs[3], more: false });
      // The end of the table ends it too.
      expect(await relay.prune(10, seqs[3])).toEqual({ deleted: 1, last: seqs[5], more: false });
      expect(await left()).toEqual(['old unpublished', 'recent', 'new']);
      expect(await relay.prune(10)).toEqual({ deleted: 0, last: seqs[5], more: false });

      // Started, the relay prunes by itself (and publishes what waits: those rows are now just published).
      await db.query(`UPDATE obp.outbox SET published_at = now() - interval '9 days' WHERE payload->'data'->>'plan_name' = 'recent'`);
      await relay.start();
      const until = Date.now() + 10_000;
      const settled = async () =>
        !(await left()).includes('recent') && (await db.query('SELECT count(*)::int AS n FROM obp.outbox WHERE published_at IS NULL')).rows[0].n === 0;
      while (Date.now() < until && !(await settled())) await new Promise((r) => setTimeout(r, 50));
      await relay.stop();
      expect(await left()).toEqual(['old unpublished', 'new']);
      const unpublished = await db.query('SELECT count(*)::int AS n FROM obp.outbox WHERE published_at IS NULL');
      expect(unpublished.rows[0].n).toBe(0);
    } finally {
      await nc.close();
    }
  });

  it('a round of pruning goes on window after window, past rows not yet on the stream, up to the first row too recent to go', async () => {
    await migrate(db, 'obr', [{ id: 1, name: 'outbox', sql: outboxTableSql }]);
    // 11 rows: 9 due, one not on the stream yet among them, then a recent one.
    for (let i = 0; i < 11; i++) await db.tx((tx) => enqueueEvent(tx, 'obr', systemClock, 'wal_1', 'plan.archived', { plan_id: 'plan_r', plan_name: `r${i}` }));
    await db.query(`UPDATE obr.outbox SET published_at = now() - interval '8 days'`);
    await db.query(`UPDATE obr.outbox SET published_at = NULL WHERE payload->'data'->>'plan_name' = 'r4'`);
    await db.query(`UPDATE obr.outbox SET published_at = now() WHERE payload->'data'->>'plan_name' = 'r10'`);
    const nc = await connectNats(nats.url, 'pruner-rounds');
    try {
      // One round, in windows of 3: [r0 r1 r2] [r3 r4 r5] [r6 r7 r8] [r9 r10].
      const relay = new OutboxRelay(db, 'obr', nc, log, { retentionDays: 7, pruneBatch: 3 });
      expect(await relay.pruneRound()).toBe(9);
      const names = (await db.query(`SELECT payload->'data'->>'plan_name' AS n FROM obr.outbox ORDER BY seq`)).rows.map((r) => r.n);
      expect(names).toEqual(['r4', 'r10']);
      expect(await relay.pruneRound()).toBe(0);
    } finally {
      await nc.close();
    }
  });

  it('the EVENTS stream keeps events EVENTS_MAX_AGE_DAYS (30 by default): its disk does not fill with years of events', async () => {
    const nc = await connectNats(nats.url, 'stream-age');
    const before = process.env.EVENTS_MAX_AGE_DAYS;
    try {
      const jsm = await jetstreamManager(nc);
      delete process.env.EVENTS_MAX_AGE_DAYS;
      await ensureEventsStream(nc);
      expect((await jsm.streams.info('EVENTS')).config.max_age).toBe(30 * 86_400 * 1e9);
      // Every service sets it at start: a changed setting reaches the stream already there.
      process.env.EVENTS_MAX_AGE_DAYS = '2';
      await ensureEventsStream(nc);
      expect((await jsm.streams.info('EVENTS')).config.max_age).toBe(2 * 86_400 * 1e9);
    } finally {
      if (before === undefined) delete process.env.EVENTS_MAX_AGE_DAYS;
      else process.env.EVENTS_MAX_AGE_DAYS = before;
      await ensureEventsStream(nc);
      await nc.close();
    }
  });
});
