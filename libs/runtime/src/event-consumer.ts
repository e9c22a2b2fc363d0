import type { NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type ConsumerMessages } from '@nats-io/jetstream';
import { EVENTS_STREAM, EventEnvelope } from '@sb/contracts';
import type { Logger } from './logger.js';
import { ensureEventsStream } from './outbox.js';
import { consumeInTrace } from './telemetry.js';

export interface EventConsumerOptions {
  /** The durable consumer's name: replicas of a service share it, so each event is handled by one of them. */
  durable: string;
  /** One subject filter (nats-server 2.9 has no `filter_subjects`). */
  filterSubject: string;
  /** Handles one event; must be idempotent (an event is redelivered until it was acknowledged). */
  handle(event: EventEnvelope): Promise<unknown>;
  log: Logger;
}

/**
 * A durable JetStream consumer of the EVENTS stream. An event is acknowledged only after `handle`
 * resolved (so its effect is committed); a failure is redelivered a second later; an event that cannot
 * parse is terminated (redelivering it would only block the ones behind it).
 */
export class DurableEventConsumer {
  private messages?: ConsumerMessages;
  private done?: Promise<void>;

  constructor(
    private readonly nc: NatsConnection,
    private readonly o: EventConsumerOptions,
  ) {}

  async start(): Promise<void> {
    const { durable, filterSubject, log } = this.o;
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
    const consumer = await jetstream(this.nc).consumers.get(EVENTS_STREAM, durable);
    this.messages = await consumer.consume({ max_messages: 50 });
    this.done = (async () => {
      for await (const m of this.messages!) {
        try {
          let raw: unknown;
          try {
            raw = m.json();
          } catch {
            raw = undefined;
          }
          const parsed = EventEnvelope.safeParse(raw);
          if (!parsed.success) {
            log.error({ consumer: durable, subject: m.subject, issues: parsed.error.issues.slice(0, 3) }, 'malformed event dropped');
            m.term();
            continue;
          }
          const event = parsed.data;
          const result = await consumeInTrace(m.subject, m.headers, { 'messaging.consumer.group.name': durable, 'messaging.message.id': event.id }, () => this.o.handle(event));
          log.info({ consumer: durable, event_id: parsed.data.id, event: parsed.data.event, result }, 'event handled');
          m.ack();
        } catch (err) {
          log.error({ err, consumer: durable }, 'event not handled; will be redelivered');
          m.nak(1000);
        }
      }
    })();
  }

  async stop(): Promise<void> {
    await this.messages?.close();
    await this.done;
  }
}
