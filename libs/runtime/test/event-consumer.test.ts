import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventEnvelope } from '@sb/contracts';
import { startNats } from '../../../scripts/stack.mjs';
import { createDatabase } from '../../../test/support/stack.js';
import { createDb, isDbUnavailable, type Db } from '../src/db.js';
import { DurableEventConsumer } from '../src/event-consumer.js';
import { ensureEventsStream } from '../src/outbox.js';

/** A private nats-server and database; the handler decides how each delivery fails. */
let db: Db;
let dropDb: () => Promise<void>;
let nats: Awaited<ReturnType<typeof startNats>>;
let natsDir: string;
let nc: NatsConnection;
const log = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  const created = await createDatabase('sb_ec');
  dropDb = created.drop;
  db = createDb(created.url, { max: 3 });
  await db.query('CREATE SCHEMA IF NOT EXISTS ec');
  natsDir = mkdtempSync(join(tmpdir(), 'sb-nats-'));
  nats = await startNats(natsDir);
  nc = await connect({ servers: nats.url, ...nats.operator });
  await ensureEventsStream(nc);
});
afterAll(async () => {
  await nc?.close();
  await db?.close();
  await dropDb?.();
  await nats?.stop();
  rmSync(natsDir, { recursive: true, force: true });
});

const dbDown = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

describe('DurableEventConsumer', () => {
  it('does not count redeliveries while the database is away as tries: the event keeps its retries', async () => {
    // Two retries: a third ordinary failure would park the event. It first meets three deliveries with
    // the database away, then one ordinary failure, then succeeds.
    const outcomes: Array<() => void> = [
      () => {
        throw dbDown();
      },
      () => {
        throw dbDown();
      },
      () => {
        throw dbDown();
      },
      () => {
        throw new Error('provider hiccup');
      },
      () => undefined,
    ];
    expect(isDbUnavailable(dbDown())).toBe(true);
    // What the consumer logs, to count the lines of the outage.
    const lines: { level: number; msg: string; err?: unknown }[] = [];
    const captured = pino({ level: 'info' }, { write: (l: string) => lines.push(JSON.parse(l)) });
    const seen: string[] = [];
    let handled: string | undefined;
    const consumer = new DurableEventConsumer(nc, {
      durable: 'ec-outage',
      filterSubject: 'events.payment.received',
      handle: async (e: EventEnvelope) => {
        const outcome =
          outcomes[seen.length] ??
          (() => {
            throw new Error('too many deliveries');
          });
        seen.push(e.id);
        outcome();
        handled = e.id;
        return 'ok';
      },
      log: captured,
      db,
      schema: 'ec',
      retryDelaysMs: [100, 100],
    });
    await consumer.start();
    try {
      const event: EventEnvelope = {
        id: 'evt_outage1',
        event: 'payment.received',
        wallet_id: 'wal_1',
        timestamp: 1,
        data: { subscription_id: 'sub_1', plan_id: 'pln_1', plan_name: 'Plan', status: 'active' },
      } as EventEnvelope;
      await jetstream(nc).publish('events.payment.received', JSON.stringify(event), { msgID: event.id });
      for (let i = 0; i < 200 && !handled; i++) await sleep(100);
      expect(handled).toBe('evt_outage1');
      expect(seen).toHaveLength(5);
      const parked = await db.query(`SELECT event_id FROM ec.dead_letters`);
      expect(parked.rows).toEqual([]);
      // Found from outside: every redelivery of every waiting event said the outage again, all outage long.
      const outageLines = lines.filter((l) => /database/.test(l.msg)).map((l) => [l.level, l.msg, 'err' in l]);
      expect(outageLines).toEqual([
        [40, 'events not handled: the database is unavailable; retried later', false],
        [30, 'database back: events handled again', false],
      ]);
    } finally {
      await consumer.stop();
    }
  });

  it('still parks an event after its retries when the database is up', async () => {
    let deliveries = 0;
    const consumer = new DurableEventConsumer(nc, {
      durable: 'ec-poison',
      filterSubject: 'events.payment.failed',
      handle: async () => {
        deliveries++;
        throw new Error('poison');
      },
      log,
      db,
      schema: 'ec',
      retryDelaysMs: [100, 100],
    });
    await consumer.start();
    try {
      const event = {
        id: 'evt_poison1',
        event: 'payment.failed',
        wallet_id: 'wal_1',
        timestamp: 1,
        data: { subscription_id: 'sub_1', plan_id: 'pln_1', plan_name: 'Plan', status: 'active' },
      } as EventEnvelope;
      await jetstream(nc).publish('events.payment.failed', JSON.stringify(event), { msgID: event.id });
      let rows: unknown[] = [];
      for (let i = 0; i < 100 && rows.length === 0; i++) {
        await sleep(100);
        rows = (await db.query(`SELECT event_id, error, deliveries FROM ec.dead_letters WHERE consumer = 'ec-poison'`)).rows;
      }
      expect(rows).toEqual([{ event_id: 'evt_poison1', error: 'poison', deliveries: 3 }]);
      expect(deliveries).toBe(3);
    } finally {
      await consumer.stop();
    }
  });
});
