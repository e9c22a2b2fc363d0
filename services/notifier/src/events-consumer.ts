import { notificationMessages, type EventEnvelope, type NotificationChannel, type WebhookEvent } from '@sb/contracts';
import { callMessage, DomainError, newId, unixSeconds } from '@sb/runtime';
import type { Message } from './channels/outcome.js';
import { loadEffective } from './channels/index.js';
import type { Deps } from './deps.js';
import { ownerMessage, subscriberMessage, subscriberWants } from './domain/messages.js';
import { ownerTargets, subscriberTargets } from './domain/settings.js';

export const DELIVERY_ID_PREFIX = 'whd_';
const NOTIFICATION_ID_PREFIX = 'ntf_';
/** Events older than this reach owners' webhooks but no person's inbox. */
const NOTIFY_MAX_AGE_S = 86_400;

interface Planned {
  audience: 'subscriber' | 'owner';
  channel: NotificationChannel;
  to: string;
  message: Message;
}

/**
 * Turns one domain event into the work it causes: a delivery per matching webhook endpoint, and a
 * notification per person and channel the settings in effect for the event's plan name (the subscriber
 * on the channels their contacts and preference pick, the owner on the events they chose), in one
 * transaction. Every row is unique per event, so a redelivered event adds nothing; the JetStream message
 * is acknowledged only after commit, so a crash before it replays the event.
 */
export async function recordEvent(d: Deps, envelope: EventEnvelope): Promise<{ deliveries: number; notifications: number }> {
  // The body receivers get: the WebhookEvent; the event id travels in the webhook-id header.
  const payload: WebhookEvent = { event: envelope.event, timestamp: envelope.timestamp, data: envelope.data };
  const body = JSON.stringify(payload);
  const planned: Planned[] = [];
  // The consumer starts at the beginning of the stream: a first deployment (or a new durable) must not
  // message anyone about cancellations and reminders of long ago.
  const recent = unixSeconds(d.clock) - envelope.timestamp <= NOTIFY_MAX_AGE_S;
  const planId = envelope.data.plan_id;
  const s = recent ? await loadEffective(d, d.db, envelope.wallet_id, planId) : undefined;
  if (s) {
    if (s.settings.owner_events.includes(envelope.event)) {
      const message = ownerMessage(envelope);
      for (const t of ownerTargets(s.settings)) planned.push({ audience: 'owner', ...t, message });
    }
    const subId = envelope.data.subscription_id;
    if (subId && subscriberWants(envelope, s.settings.subscriber_events)) {
      // The contacts as they are now, and the portal link (never carried in events: it holds the token).
      const contact = await callMessage(d.bus, notificationMessages.subscriptionContact, { wallet_id: envelope.wallet_id, subscription_id: subId }).catch(
        (err) => {
          if (err instanceof DomainError && err.kind === 'not_found') return undefined;
          throw err;
        },
      );
      if (contact) {
        const message = subscriberMessage(envelope, { name: contact.name, manageUrl: contact.manage_url, merchant: s.settings.merchant_name });
        for (const t of subscriberTargets(s.settings, contact)) planned.push({ audience: 'subscriber', ...t, message });
      }
    }
  }
  return d.db.tx(async (tx) => {
    const nowMs = d.clock.nowMs();
    const now = Math.floor(nowMs / 1000);
    let deliveries = 0;
    for (const ep of await d.endpoints.matching(tx, envelope.wallet_id, envelope.event, planId)) {
      const fresh = await d.deliveries.record(tx, {
        id: newId(DELIVERY_ID_PREFIX, nowMs),
        endpoint_id: ep.id,
        wallet_id: envelope.wallet_id,
        event_id: envelope.id,
        event: envelope.event,
        body,
        now,
      });
      if (fresh) deliveries++;
    }
    let notifications = 0;
    for (const p of planned) {
      const fresh = await d.notifications.record(tx, {
        id: newId(NOTIFICATION_ID_PREFIX, nowMs),
        wallet_id: envelope.wallet_id,
        event_id: envelope.id,
        event: envelope.event,
        audience: p.audience,
        channel: p.channel,
        recipient: p.to,
        subscription_id: envelope.data.subscription_id ?? null,
        plan_id: planId ?? null,
        settings_plan_id: s!.row,
        subject: p.message.subject,
        body_sealed: d.secrets.seal(JSON.stringify(p.message)),
        created_at: now,
      });
      if (fresh) notifications++;
    }
    return { deliveries, notifications };
  });
}
