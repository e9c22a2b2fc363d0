import { SpanKind } from '@opentelemetry/api';
import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import { Gauge, type Registry } from 'prom-client';
import { EVENTS_STREAM, eventSubject, type EventEnvelope, type EventName } from '@sb/contracts';
import type { Clock } from './clock.js';
import type { Db, Migration, Queryable } from './db.js';
import { newId } from './ids.js';
import type { Logger } from './logger.js';
import { contextOf, injectTraceHeaders, inSpan, traceCarrier, type TraceCarrier } from './telemetry.js';
import { creatingStream } from './nats.js';
import { Poller } from './poller.js';
import { ReplyInbox } from './reply-inbox.js';

/** The outbox table every event-emitting service has in its own schema (used in its first migration). */
export const outboxTableSql = `
CREATE TABLE outbox (
  seq BIGSERIAL PRIMARY KEY,
  event_id TEXT NOT NULL UNIQUE,
  subject TEXT NOT NULL,
  payload JSONB NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  published_at TIMESTAMPTZ,
  trace_context JSONB
);
CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;
`;

/**
 * The trace context of each outbox row (the request or sweep that caused the event), for outboxes made
 * before it existed. Shared migrations of the runtime take ids from 100 up, clear of each service's own.
 */
export const outboxTraceMigration: Migration = {
  id: 100,
  name: 'trace context of outbox rows',
  sql: 'ALTER TABLE outbox ADD COLUMN IF NOT EXISTS trace_context JSONB',
};

function envelopeOf(clock: Clock, walletId: string, event: EventName, data: EventEnvelope['data']): EventEnvelope {
  return { id: newId('evt_', clock.nowMs()), event, wallet_id: walletId, timestamp: Math.floor(clock.nowMs() / 1000), data };
}

/** Records an event in the same transaction as the state change it describes. */
export async function enqueueEvent(
  tx: Queryable,
  schema: string,
  clock: Clock,
  walletId: string,
  event: EventName,
  data: EventEnvelope['data'],
): Promise<EventEnvelope> {
  const envelope = envelopeOf(clock, walletId, event, data);
  // The event continues the trace of what caused it: the relay publishes it as a child of this context.
  await tx.query(`INSERT INTO ${schema}.outbox (event_id, subject, payload, trace_context) VALUES ($1, $2, $3, $4)`, [
    envelope.id,
    eventSubject(event),
    JSON.stringify(envelope),
    traceCarrier(),
  ]);
  return envelope;
}

/**
 * Records many events in one statement, in the same transaction as the state changes they describe;
 * their outbox order (and so their publishing order) is the order given.
 */
export async function enqueueEvents(
  tx: Queryable,
  schema: string,
  clock: Clock,
  events: { walletId: string; event: EventName; data: EventEnvelope['data'] }[],
): Promise<EventEnvelope[]> {
  if (!events.length) return [];
  const envelopes = events.map((e) => envelopeOf(clock, e.walletId, e.event, e.data));
  await tx.query(
    `INSERT INTO ${schema}.outbox (event_id, subject, payload, trace_context)
     SELECT e.id, e.subject, e.payload, $4::jsonb FROM unnest($1::text[], $2::text[], $3::jsonb[]) WITH ORDINALITY AS e(id, subject, payload, n) ORDER BY e.n`,
    [envelopes.map((e) => e.id), envelopes.map((e) => eventSubject(e.event)), envelopes.map((e) => JSON.stringify(e)), traceCarrier()],
  );
  return envelopes;
}

const NS_PER_DAY = 86_400 * 1_000_000_000;

export async function ensureEventsStream(nc: NatsConnection): Promise<void> {
  const jsm = await jetstreamManager(nc);
  // NATS_REPLICAS and EVENTS_MAX_AGE_DAYS are validated with the service's config at start (commonConfig);
  // every service sets the stream's configuration, so all of them read the same variables.
  const config = {
    name: EVENTS_STREAM,
    subjects: ['events.>'],
    duplicate_window: 10 * 60 * 1_000_000_000,
    num_replicas: Number(process.env.NATS_REPLICAS ?? 1) || 1,
    max_age: (Number(process.env.EVENTS_MAX_AGE_DAYS ?? 30) || 30) * NS_PER_DAY,
  };
  await creatingStream(async () => {
    try {
      await jsm.streams.info(EVENTS_STREAM);
      await jsm.streams.update(EVENTS_STREAM, config);
    } catch {
      await jsm.streams.add(config);
    }
  });
}

/** How long a publish waits for the stream's acknowledgement (nats.js's JetStream default). */
const PUBLISH_ACK_TIMEOUT_MS = 5_000;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * JetStream publishing as the server defines it: a request to the subject carrying `Nats-Msg-Id`, answered
 * by the stream with `{stream, seq}` or `{error}`. Done on our reply inbox because nats.js's request
 * builds an Error (a stack trace) for every request it settles, even a successful one: 3% of billing's
 * CPU in a renewal sweep.
 */
export class StreamPublisher {
  private readonly inbox: ReplyInbox;

  constructor(nc: NatsConnection, inboxPrefix?: string) {
    this.inbox = new ReplyInbox(nc, inboxPrefix);
  }

  /** Resolves once the stream has stored the message (or already had one with this id). */
  async publish(subject: string, data: string, msgId: string, headers: MsgHdrs): Promise<{ stream: string; seq: number; duplicate: boolean }> {
    headers.set('Nats-Msg-Id', msgId);
    const msg = await this.inbox.request(subject, encoder.encode(data), headers, { waitMs: PUBLISH_ACK_TIMEOUT_MS });
    const ack = JSON.parse(decoder.decode(msg.data)) as {
      stream?: string;
      seq?: number;
      duplicate?: boolean;
      error?: { code: number; err_code: number; description: string };
    };
    if (ack.error) throw new JetStreamApiError(ack.error);
    if (!ack.stream) throw new Error(`${subject}: not an acknowledgement from a stream`);
    return { stream: ack.stream, seq: ack.seq ?? 0, duplicate: ack.duplicate === true };
  }
}

/** Events published per round (side by side: one round trip for their acks). */
const BATCH = 250;
/** Published outbox rows past their retention deleted per statement, from the oldest. */
const PRUNE_BATCH = 5000;

/**
 * Moves committed events to JetStream. Rows are claimed with SKIP LOCKED so replicas share the work; the
 * event id is the JetStream message id, so a crash after publishing and before marking only produces a
 * duplicate that the stream drops.
 */
export class OutboxRelay {
  private stream?: StreamPublisher;
  private readonly poller: Poller;
  private readonly pruner: Poller;
  private readonly inboxPrefix?: string;
  private readonly retentionDays: number;
  private readonly pruneBatch: number;

  constructor(
    private readonly db: Db,
    private readonly schema: string,
    private readonly nc: NatsConnection,
    log: Logger,
    {
      intervalMs = 200,
      inboxPrefix,
      retentionDays = 7,
      pruneIntervalMs = 60_000,
      pruneBatch = PRUNE_BATCH,
    }: { intervalMs?: number; inboxPrefix?: string; retentionDays?: number; pruneIntervalMs?: number; pruneBatch?: number } = {},
  ) {
    this.inboxPrefix = inboxPrefix;
    this.retentionDays = retentionDays;
    // A full batch means more may wait: the poller runs again at once. Each event's producer span
    // continues the trace that wrote it, so the rounds themselves are not traced.
    this.poller = new Poller('outbox relay', intervalMs, async () => (await this.publishBatch(BATCH)) === BATCH, log, false);
    this.pruneBatch = pruneBatch;
    this.pruner = new Poller('outbox prune', pruneIntervalMs, async () => (await this.pruneRound(), false), log);
  }

  async start(): Promise<void> {
    await ensureEventsStream(this.nc);
    this.stream = new StreamPublisher(this.nc, this.inboxPrefix);
    this.poller.start();
    this.pruner.start();
  }

  /**
   * One round of pruning: from the oldest row on, a window after the other, each from where the one before
   * ended (not past the dead index entries of the rows it deleted), until a row on the stream too recently
   * to go (rows are written in seq order: the rest are as recent), the end, or a stop. The next round, a
   * minute later, starts again from the oldest, where rows published meanwhile may have come due.
   * Returns how many rows went.
   */
  async pruneRound(): Promise<number> {
    let from = 0;
    let deleted = 0;
    for (;;) {
      const w = await this.prune(this.pruneBatch, from);
      deleted += w.deleted;
      if (!w.more || this.pruner.stopping) return deleted;
      from = w.last;
    }
  }

  /**
   * Deletes the rows on the stream for longer than the retention among the `limit` rows after `from` (by
   * `seq`), a window that bounds the work however long the table (a filter on `published_at` would read
   * every row when none is due). Rows not published yet stay, however old. `last`: the window's highest
   * `seq`; `more`: the window was full and held no row published too recently to go, so the next one may
   * hold due rows too.
   */
  async prune(limit: number, from = 0): Promise<{ deleted: number; last: number; more: boolean }> {
    const t = `${this.schema}.outbox`;
    const { rows } = await this.db.query<{ size: number; deleted: number; last: number | null; recent: boolean }>(
      `WITH w AS (SELECT seq, published_at < now() - make_interval(days => $2) AS due, published_at IS NOT NULL AS published
                  FROM ${t} WHERE seq > $3 ORDER BY seq LIMIT $1),
            d AS (DELETE FROM ${t} WHERE seq = ANY (ARRAY(SELECT seq FROM w WHERE due)) RETURNING seq)
       SELECT (SELECT count(*) FROM w)::int AS size, (SELECT count(*) FROM d)::int AS deleted,
              (SELECT max(seq) FROM w) AS last, EXISTS (SELECT 1 FROM w WHERE published AND NOT due) AS recent`,
      [limit, this.retentionDays, from],
    );
    const r = rows[0]!;
    return { deleted: r.deleted, last: Number(r.last ?? 0), more: r.size === limit && !r.recent };
  }

  /**
   * Events written and not yet on the stream, and how long the oldest has waited: the relay's lag, on
   * /metrics (`outbox_unpublished_events`, `outbox_oldest_unpublished_seconds`).
   */
  watchBacklog(registry: Registry): void {
    const db = this.db;
    const schema = this.schema;
    let last: Promise<{ n: number; age: number }> | undefined;
    // One query per scrape for both gauges: the second takes the first's answer.
    const backlog = () =>
      (last ??= db
        .query<{ n: number; age: number | null }>(
          `SELECT count(*)::int AS n, extract(epoch FROM now() - min(created_at))::float8 AS age FROM ${schema}.outbox WHERE published_at IS NULL`,
        )
        .then((r) => ({ n: r.rows[0]!.n, age: r.rows[0]!.age ?? 0 }))
        .finally(() => setImmediate(() => (last = undefined))));
    const gauges: [string, string, (b: { n: number; age: number }) => number][] = [
      ['outbox_unpublished_events', 'Events written to the outbox and not yet published to the stream', (b) => b.n],
      ['outbox_oldest_unpublished_seconds', 'How long the oldest unpublished outbox event has waited (0 when none)', (b) => b.age],
    ];
    for (const [name, help, pick] of gauges) {
      new Gauge({
        name,
        help,
        registers: [registry],
        async collect() {
          this.set(await backlog().then(pick, () => Number.NaN));
        },
      });
    }
  }

  /** Publishes up to `limit` pending events; returns how many. */
  async publishBatch(limit: number): Promise<number> {
    const stream = this.stream;
    if (!stream) return 0;
    return this.db.tx(async (tx) => {
      const { rows } = await tx.query<{ seq: number; event_id: string; subject: string; payload: unknown; trace_context: TraceCarrier | null }>(
        `SELECT seq, event_id, subject, payload, trace_context FROM ${this.schema}.outbox WHERE published_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`,
        [limit],
      );
      // Published side by side, acknowledgements awaited together: one round trip per batch, not per row.
      // The connection keeps their order. One failing rolls the batch back and it is published again (the
      // ones that made it are dropped as duplicates of their message id), so after a fault an event may
      // follow a later one, as a redelivered event does anyway.
      await Promise.all(
        rows.map((row) =>
          // A producer span in the trace that wrote the row; its context travels in the message headers.
          inSpan(
            `${row.subject} publish`,
            {
              parent: contextOf(row.trace_context),
              kind: SpanKind.PRODUCER,
              attributes: { 'messaging.system': 'nats', 'messaging.destination.name': row.subject, 'messaging.message.id': row.event_id },
            },
            async () => {
              const h = natsHeaders();
              injectTraceHeaders(h);
              await stream.publish(row.subject, JSON.stringify(row.payload), row.event_id, h);
            },
          ),
        ),
      );
      if (rows.length) {
        await tx.query(`UPDATE ${this.schema}.outbox SET published_at = now() WHERE seq = ANY($1::bigint[])`, [rows.map((r) => r.seq)]);
      }
      return rows.length;
    });
  }

  async stop(): Promise<void> {
    await Promise.all([this.poller.stop(), this.pruner.stop()]);
  }
}
