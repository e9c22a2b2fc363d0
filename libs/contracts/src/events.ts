import { z } from './zod.js';
import { Id, UnixSeconds } from './common.js';

export const EventName = z
  .enum([
    'subscription.created',
    'subscription.activated',
    'subscription.renewed',
    'subscription.payment_failed',
    'subscription.past_due',
    'subscription.paused',
    'subscription.resumed',
    'subscription.cancelled',
    'subscription.expired',
    'subscription.extended',
    'subscription.trial_ending',
    'payment.received',
    'payment.failed',
    'payment.unapplied',
    'renewal.reminder',
    'plan.archived',
    'nwc.wallet_disabled',
  ])
  .openapi('EventName');
export type EventName = z.infer<typeof EventName>;

/**
 * The outgoing event payload (WebhookEvent). Plan-level events (`plan.archived`) carry no
 * subscription, so `subscription_id` and `status` are optional there and present on every other event.
 */
export const WebhookEventData = z
  .object({
    subscription_id: z.string().optional(),
    plan_id: z.string(),
    plan_name: z.string(),
    subscriber_email: z.string().optional(),
    subscriber_name: z.string().optional(),
    status: z.string().optional(),
    amount_sats: z.number().int().optional(),
  })
  .catchall(z.unknown());

export const WebhookEvent = z
  .object({ event: EventName, timestamp: UnixSeconds, data: WebhookEventData })
  .openapi('WebhookEvent');
export type WebhookEvent = z.infer<typeof WebhookEvent>;

/** What travels on JetStream: the WebhookEvent plus a stable id (also the JetStream message id) and its tenant. */
export const EventEnvelope = WebhookEvent.extend({ id: Id, wallet_id: Id }).openapi('EventEnvelope');
export type EventEnvelope = z.infer<typeof EventEnvelope>;

export function eventSubject(name: EventName): string {
  return `events.${name}`;
}
