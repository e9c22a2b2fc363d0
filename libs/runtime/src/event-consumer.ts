import type { NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type ConsumerMessages, type JsMsg } from '@nats-io/jetstream';
import { Counter, type Registry } from 'prom-client';
import { EVENTS_STREAM, EventEnvelope } from '@sb/contracts';
import { lockUntilCommit, type Db } from './db.js';
import type { Logger } from './logger.js';
import { OutageLog } from './outage.js';
import { ensureEventsStream } from './outbox.js';
import { keepTrying } from './listener.js';
import { Poller } from './poller.js';
import { consumeInTrace } from './telemetry.js';

/**
 * Waits before the 2nd, 3rd, ... delivery of an event that failed; after the last one fails the event
 * is parked. About 1 h 50 min in all: long enough to ride out a restart or an outage of a dependency,
 * short enough that a poison event never loops.
 */
export const DEFAULT_RETRY_DELAYS_MS: readonly number[] = [1_000, 5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000];

const DB_UNAVAILABLE_RETRY_MS = 2_000;
/** Bounds the memory of redeliveries while the database was away (see `dbWaits`). */
const MAX_DB_WAITS_TRACKED = 10_000;

export interface EventConsumerOptions {
  /** The durable consumer's name: replicas of a service share it, so each event is handled by one of them. */
  durable: string;
  /** One subject filter (nats-server 2.9 has no `filter_subjects`). */
  filterSubject: string;
  /**
   * Handles one event; must be idempotent (an event is redelivered until it was acknowledged).
   * `storedAtMs`: when the stream stored it, by the server's wall clock (absent for a parked event an
   * operator replays).
   */
  handle(event: EventEnvelope, meta: { storedAtMs?: number }): Promise<unknown>;
  log: Logger;
  /** Where events that keep failing are parked: `<schema>.dead_letters` of the service's database. */
  db: Db;
  schema: string;
  /** `/metrics` of the service: events parked and replayed, per consumer. */
  registry?: Registry;
  retryDelaysMs?: readonly number[];
  /** How often parked events an operator asked to replay are looked for. */
  replayPollMs?: number;
  /**
   * Events handled at once (default 1: in stream order). Only for a handler whose events do not depend on
   * each other's order: each is still acknowledged only after its own effect committed.
   */
  concurrency?: number;
}

/** The dead-letter table; created by the consumer itself so every service using it has one. */
export const deadLetterTableSql = (schema: string) => `
CREATE TABLE IF NOT EXISTS ${schema}.dead_letters (
  consumer TEXT NOT NULL,
  event_id TEXT NOT NULL,
  event TEXT NOT NULL,
  payload JSONB NOT NULL,
  error TEXT NOT NULL,
  deliveries INT NOT NULL,
  parked_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  -- set by the operator command (npm run dead-letters -- replay): the consumer runs the event again
  replay_requested_at TIMESTAMPTZ,
  replays INT NOT NULL DEFAULT 0,
  PRIMARY KEY (consumer, event_id)
)`;

const counters = new WeakMap<Registry, { parked: Counter; replayed: Counter }>();
function metricsOf(registry: Registry | undefined) {
  if (!registry) return undefined;
  let m = counters.get(registry);
  if (!m) {
    m = {
      parked: new Counter({
        name: 'events_parked_total',
        help: 'Events parked in the dead-letter table after their last retry failed',
        labelNames: ['consumer'],
        registers: [registry],
      }),
      replayed: new Counter({
        name: 'events_replayed_total',
        help: 'Parked events replayed by an operator and handled',
        labelNames: ['consumer'],
        registers: [registry],
      }),
    };
    counters.set(registry, m);
  }
  return m;
}

const errorText = (err: unknown) => String((err as Error)?.message ?? err).slice(0, 2000);

/**
 * A durable JetStream consumer of the EVENTS stream. An event is acknowledged only after `handle`
 * resolved (so its effect is committed). A failure is redelivered after a growing delay; when the last
 * retry fails too the event is parked in the dead-letter table (logged once, counted in `/metrics`) and
 * the consumer goes on. `npm run dead-letters` lists parked events and asks for a replay, which the
 * consumer runs. An event that cannot parse is parked at once (redelivering it changes nothing).
 */
export class DurableEventConsumer {
  private messages?: ConsumerMessages;
  private done?: Promise<void>;
  private replays?: Poller;
  private readonly delays: readonly number[];
  private readonly metrics;
  /**
   * Per stream sequence, the deliveries this replica nak'ed because the database was away. JetStream
   * counts them in `deliveryCount`; they are subtracted so an outage does not use up an event's retries.
   * Kept in memory (the database is the thing that is away): a redelivery picked up by another replica,
   * or after a restart, counts the outage's deliveries as tries.
   */
  private readonly dbWaits = new Map<number, number>();
  /** Every event waiting on the database is redelivered every few seconds: the outage is said once. */
  private readonly outage: OutageLog;

  constructor(
    private readonly nc: NatsConnection,
    private readonly o: EventConsumerOptions,
  ) {
    this.delays = o.retryDelaysMs?.length ? o.retryDelaysMs : DEFAULT_RETRY_DELAYS_MS;
    this.metrics = metricsOf(o.registry);
    this.outage = new OutageLog(
      o.log,
      { consumer: o.durable },
      { away: 'events not handled: the database is unavailable; retried later', back: 'database back: events handled again' },
    );
  }

  async start(): Promise<void> {
    const { durable, log, db, schema } = this.o;
    await db.tx(async (tx) => {
      // Replicas start together: one creates the table, the others wait for it.
      await lockUntilCommit(tx, `${schema}.dead_letters`);
      await tx.query(deadLetterTableSql(schema));
    });
    // The stream may not be there yet, or the server may refuse the consumer until its auth.conf is
    // reloaded: the service waits for it (not ready meanwhile) rather than exiting.
    const consumer = await keepTrying(`event consumer ${durable} not set up`, () => this.consumer(), { log, details: { consumer: durable } });
    const limit = Math.max(1, this.o.concurrency ?? 1);
    // Enough pulled ahead to keep `limit` events under way.
    this.messages = await consumer.consume({ max_messages: Math.max(50, limit) });
    this.done = (async () => {
      const inFlight = new Set<Promise<void>>();
      for await (const m of this.messages!) {
        const one = this.deliver(m)
          .catch((err) => {
            // Parking itself failed (the database is away): the event stays in the stream for later.
            log.error({ err, consumer: durable }, 'event could not be parked; redelivered');
            m.nak(this.delays.at(-1));
          })
          .finally(() => inFlight.delete(one));
        inFlight.add(one);
        if (inFlight.size >= limit) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
    })();
    this.replays = new Poller(`${durable}-replays`, this.o.replayPollMs ?? 2000, () => this.replayRequested(), log);
    this.replays.start();
  }

  private async consumer() {
    const { durable, filterSubject } = this.o;
    await ensureEventsStream(this.nc);
    const jsm = await jetstreamManager(this.nc);
    await jsm.consumers
      .add(EVENTS_STREAM, {
        durable_name: durable,
        filter_subject: filterSubject,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: 30_000_000_000,
      })
      .catch(async (err) => {
        if (!(await jsm.consumers.info(EVENTS_STREAM, durable).catch(() => null))) throw err;
      });
    return jetstream(this.nc).consumers.get(EVENTS_STREAM, durable);
  }

  private async deliver(m: JsMsg): Promise<void> {
    const { durable, log } = this.o;
    let raw: unknown;
    try {
      raw = m.json();
    } catch {
      raw = m.string();
    }
    const parsed = EventEnvelope.safeParse(raw);
    if (!parsed.success) {
      await this.park(
        m,
        raw,
        `malformed event: ${parsed.error.issues
          .slice(0, 3)
          .map((i) => `${i.path.join('.')}: ${i.message}`)
          .join('; ')}`,
      );
      this.settle(m);
      m.term();
      return;
    }
    try {
      const event = parsed.data;
      const result = await consumeInTrace(m.subject, m.headers, { 'messaging.consumer.group.name': durable, 'messaging.message.id': event.id }, () =>
        this.o.handle(event, { storedAtMs: m.time.getTime() }),
      );
      log.info({ consumer: durable, event_id: event.id, event: event.event, result }, 'event handled');
      this.outage.ok();
      this.settle(m);
      m.ack();
    } catch (err) {
      // The database being away is no fault of the event: it waits for the database (and could not be
      // parked meanwhile anyway) instead of spending its retries.
      if (this.outage.failed(err)) {
        log.debug({ consumer: durable, event_id: parsed.data.id }, 'event waits for the database');
        this.countDbWait(m);
        m.nak(DB_UNAVAILABLE_RETRY_MS);
        return;
      }
      const attempt = m.info.deliveryCount - (this.dbWaits.get(m.seq) ?? 0);
      if (attempt > this.delays.length) {
        await this.park(m, parsed.data, errorText(err));
        this.settle(m);
        m.term();
        return;
      }
      log.warn({ err, consumer: durable, event_id: parsed.data.id, attempt }, 'event not handled; retried later');
      m.nak(this.delays[attempt - 1]);
    }
  }

  private countDbWait(m: JsMsg): void {
    const n = this.dbWaits.get(m.seq) ?? 0;
    this.dbWaits.delete(m.seq); // re-inserted last: the oldest entries go first when the map is full
    this.dbWaits.set(m.seq, n + 1);
    if (this.dbWaits.size > MAX_DB_WAITS_TRACKED) this.dbWaits.delete(this.dbWaits.keys().next().value!);
  }

  /** The event is done with (acknowledged or terminated): its count of outage deliveries goes. */
  private settle(m: JsMsg): void {
    this.dbWaits.delete(m.seq);
  }

  /** Into the dead-letter table (once per consumer and event id), logged once, counted. */
  private async park(m: JsMsg, payload: unknown, error: string): Promise<void> {
    const { durable, log, db, schema } = this.o;
    const envelope = payload as Partial<EventEnvelope> | undefined;
    const eventId = typeof envelope?.id === 'string' ? envelope.id : `seq:${m.seq}`;
    const event = typeof envelope?.event === 'string' ? envelope.event : m.subject;
    const { rowCount } = await db.query(
      `INSERT INTO ${schema}.dead_letters (consumer, event_id, event, payload, error, deliveries) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (consumer, event_id) DO NOTHING`,
      [durable, eventId, event, JSON.stringify(payload ?? null), error, m.info.deliveryCount],
    );
    if (rowCount === 1) {
      this.metrics?.parked.inc({ consumer: durable });
      log.error(
        { consumer: durable, event_id: eventId, event, deliveries: m.info.deliveryCount, error },
        'event parked in dead_letters after its last retry; replay with npm run dead-letters',
      );
    }
  }

  /** Runs the parked events an operator asked to replay; handled ones leave the table, failing ones stay parked. */
  private async replayRequested(): Promise<boolean> {
    const { durable, log, db, schema } = this.o;
    const { rows } = await db.query<{ event_id: string; payload: unknown }>(
      `SELECT event_id, payload FROM ${schema}.dead_letters WHERE consumer = $1 AND replay_requested_at IS NOT NULL ORDER BY parked_at LIMIT 20`,
      [durable],
    );
    for (const r of rows) {
      // Claimed by clearing the request: another replica does not run it too.
      const claimed = await db.query(
        `UPDATE ${schema}.dead_letters SET replay_requested_at = NULL, replays = replays + 1 WHERE consumer = $1 AND event_id = $2 AND replay_requested_at IS NOT NULL`,
        [durable, r.event_id],
      );
      if (claimed.rowCount !== 1) continue;
      const parsed = EventEnvelope.safeParse(r.payload);
      try {
        if (!parsed.success) throw new Error('malformed event');
        const result = await this.o.handle(parsed.data, {});
        await db.query(`DELETE FROM ${schema}.dead_letters WHERE consumer = $1 AND event_id = $2`, [durable, r.event_id]);
        this.metrics?.replayed.inc({ consumer: durable });
        log.info({ consumer: durable, event_id: r.event_id, result }, 'parked event replayed');
      } catch (err) {
        await db.query(`UPDATE ${schema}.dead_letters SET error = $3 WHERE consumer = $1 AND event_id = $2`, [durable, r.event_id, errorText(err)]);
        log.error({ err, consumer: durable, event_id: r.event_id }, 'replayed event failed again; it stays parked');
      }
    }
    return rows.length === 20;
  }

  async stop(): Promise<void> {
    await this.replays?.stop();
    await this.messages?.close();
    await this.done;
  }
}
