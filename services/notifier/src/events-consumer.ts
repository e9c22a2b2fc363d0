import type { EventEnvelope, WebhookEvent } from '@sb/contracts';
import { newId, unixSeconds } from '@sb/runtime';
import type { Deps } from './deps.js';
import { subscriberMail } from './domain/email.js';

export const DELIVERY_ID_PREFIX = 'whd_';
/** Events older than this reach owners' webhooks but no subscriber's mailbox. */
const MAIL_MAX_AGE_S = 86_400;

/**
 * Turns one domain event into the work it causes: a delivery per matching webhook endpoint and the
 * subscriber's e-mail, in one transaction. Both are unique per event, so a redelivered event adds nothing;
 * the JetStream message is acknowledged only after commit, so a crash before it replays the event.
 */
export async function recordEvent(d: Deps, envelope: EventEnvelope): Promise<{ deliveries: number; email: boolean }> {
  // The body receivers get: the WebhookEvent; the event id travels in the webhook-id header.
  const payload: WebhookEvent = { event: envelope.event, timestamp: envelope.timestamp, data: envelope.data };
  const body = JSON.stringify(payload);
  // The consumer starts at the beginning of the stream: a first deployment (or a new durable) must not
  // mail subscribers about cancellations and reminders of long ago.
  const recent = unixSeconds(d.clock) - envelope.timestamp <= MAIL_MAX_AGE_S;
  const mail = d.mailEnabled && recent ? subscriberMail(envelope) : null;
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
