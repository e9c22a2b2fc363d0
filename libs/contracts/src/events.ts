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

/**
 * `payment.unapplied`: a paid payment (typically late) billing could not apply to any subscription; it is
 * recorded once, the payment shows `unapplied_reason`, and the owner refunds it.
 */
export const PaymentUnappliedData = WebhookEventData.extend({
  subscription_id: z.string(),
  status: z.string().openapi({ description: "The subscription's status" }),
  payment_id: Id,
  amount_sats: z.number().int().openapi({ description: 'What was paid' }),
  payment_method: z.string(),
  reason: z.string(),
}).openapi('PaymentUnappliedData');

/**
 * `subscription.expired`: a checkout unpaid for 24 h, or a subscription left `payment_failed` through the
 * dunning window (then `notify_subscriber` is true). The contact may subscribe again.
 */
export const SubscriptionExpiredData = WebhookEventData.extend({
  subscription_id: z.string(),
  status: z.literal('expired'),
  reason: z.string(),
  notify_subscriber: z.boolean().optional(),
}).openapi('SubscriptionExpiredData');

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
