import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type ConsumerMessages } from '@nats-io/jetstream';
import { EVENTS_STREAM, EventEnvelope, type WebhookEvent } from '@sb/contracts';
import { ensureEventsStream, newId, type NatsConnection } from '@sb/runtime';
import type { Deps } from './deps.js';
import { subscriberMail } from './domain/email.js';

const DURABLE = 'notifier';
export const DELIVERY_ID_PREFIX = 'whd_';

/**
 * Turns one domain event into the work it causes: a delivery per matching webhook endpoint and the
 * subscriber's e-mail, in one transaction. Both are unique per event, so a redelivered event adds nothing;
 * the JetStream message is acknowledged only after commit, so a crash before it replays the event.
 */
export async function recordEvent(d: Deps, envelope: EventEnvelope): Promise<{ deliveries: number; email: boolean }> {
  // The body receivers get: the WebhookEvent; the event id travels in the webhook-id header.
  const payload: WebhookEvent = { event: envelope.event, timestamp: envelope.timestamp, data: envelope.data };
  const body = JSON.stringify(payload);
  const mail = d.mailEnabled ? subscriberMail(envelope) : null;
  return d.db.tx(async (tx) => {
    const nowMs = d.clock.nowMs();
    const now = Math.floor(nowMs / 1000);
    let deliveries = 0;
    for (const ep of await d.endpoints.matching(tx, envelope.wallet_id, envelope.event, envelope.data.plan_id)) {
      const fresh = await d.deliveries.record(tx, {
        id: newId(DELIVERY_ID_PREFIX, nowMs), endpoint_id: ep.id, wallet_id: envelope.wallet_id, event_id: envelope.id, event: envelope.event, body, now,
      });
      if (fresh) deliveries++;
    }
    const email = mail ? await d.emails.record(tx, envelope.wallet_id, envelope.id, envelope.event, mail, now) : false;
    return { deliveries, email };
  });
}

/** The durable JetStream consumer of every domain event (`events.>`). */
export class EventsConsumer {
  private messages?: ConsumerMessages;
  private done?: Promise<void>;

  constructor(
    private readonly d: Deps,
    private readonly nc: NatsConnection,
  ) {}

  async start(): Promise<void> {
    await ensureEventsStream(this.nc);
    const jsm = await jetstreamManager(this.nc);
    await jsm.consumers
      .add(EVENTS_STREAM, {
        durable_name: DURABLE,
        // nats-server 2.9: one filter_subject (filter_subjects came with 2.10).
        filter_subject: 'events.>',
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: 30_000_000_000,
      })
      .catch(async (err) => {
        if (!(await jsm.consumers.info(EVENTS_STREAM, DURABLE).catch(() => null))) throw err;
      });
    const consumer = await jetstream(this.nc).consumers.get(EVENTS_STREAM, DURABLE);
    this.messages = await consumer.consume({ max_messages: 50 });
    this.done = (async () => {
      for await (const m of this.messages!) {
        try {
          const parsed = EventEnvelope.safeParse(m.json());
          if (!parsed.success) {
            // Redelivering a message that can never parse would only block the ones behind it.
            this.d.log.error({ subject: m.subject, issues: parsed.error.issues.slice(0, 3) }, 'malformed event dropped');
            m.term();
            continue;
          }
          const result = await recordEvent(this.d, parsed.data);
          this.d.log.info({ event_id: parsed.data.id, event: parsed.data.event, ...result }, 'event recorded');
          m.ack();
        } catch (err) {
          this.d.log.error({ err }, 'event not recorded; will be redelivered');
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
