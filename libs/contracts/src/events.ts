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
 * The data of every outgoing event (the spec's WebhookEvent): the subscription, its plan, the subscriber,
 * and `status`, the state of what the event is about (the subscription's, a payment's, `archived` for a
 * plan, `disabled` for a wallet connection). Further keys may be present.
 */
export const WebhookEventData = z
  .object({
    subscription_id: Id,
    plan_id: Id,
    plan_name: z.string(),
    subscriber_email: z.string().optional(),
    subscriber_name: z.string().optional(),
    status: z.string(),
    amount_sats: z.number().int().optional(),
    interval: z.string().optional().openapi({ description: "Subscription events: the plan's billing interval (`weekly`, `monthly`, `yearly`)" }),
  })
  // Not a named component: each event's schema is written out whole (allOf could not relax a required field).
  .catchall(z.unknown());

/**
 * `payment.unapplied`: a paid payment (typically late) billing could not apply to any subscription; it is
 * recorded once, the payment shows `unapplied_reason`, and the owner refunds it.
 */
const PaymentUnappliedData = WebhookEventData.extend({
  subscription_id: z.string(),
  status: z.string().openapi({ description: "The subscription's status" }),
  payment_id: Id,
  amount_sats: z.number().int().openapi({ description: 'What was paid' }),
  payment_method: z.string(),
  reason: z.string(),
});

/** What a card or wallet-processor payment charged (absent for bitcoin payments). */
const FiatCharged = {
  amount_fiat: z.number().optional().openapi({ description: 'Card and wallet-processor payments: what was charged, in `currency`' }),
  currency: z.string().optional().openapi({ description: 'Lower-case ISO 4217 code of `amount_fiat`, e.g. `usd`' }),
};

/**
 * Renewal reminders, trial endings and dunning steps: the period the renewal pays for. From the current
 * period's end while it can be paid in time; once access has ended (`payment_failed`), or for a
 * subscription resumed after its period (`pending`), a new period starts when it is paid: then these are
 * its dates if paid at the event's time.
 */
const RenewalPeriod = {
  renewal_period_start: UnixSeconds.optional().openapi({ description: 'Start of the period the renewal pays for' }),
  renewal_period_end: UnixSeconds.optional().openapi({ description: 'End of the period the renewal pays for' }),
  renewal_period_if_paid_by: UnixSeconds.optional().openapi({
    description:
      'The period continues from the current end only when paid by this time (the end of grace); paid later, a new period starts at the payment. ' +
      'With `renewal_period_from_payment` (days an extend granted after access ended): the period starts at the payment and ends at `renewal_period_end` when paid by this time',
  }),
  renewal_period_from_payment: z.literal(true).optional().openapi({
    description: "A new period starts when the renewal is paid: `renewal_period_start` and `renewal_period_end` hold only if paid at the event's time",
  }),
};

/**
 * `subscription.activated` and `subscription.renewed`: a payment started a period; what a receipt says
 * (the period it covers, the payment and how it was paid).
 */
const PaidPeriodData = WebhookEventData.extend({
  subscription_id: z.string(),
  payment_id: Id,
  amount_sats: z.number().int().openapi({ description: 'What was paid' }),
  ...FiatCharged,
  payment_method: z.string(),
  current_period_start: UnixSeconds,
  current_period_end: UnixSeconds,
});

/** No invoice could be made for the renewal: the payments service's reason (see the description). */
const RenewalRefused = z.string().optional().openapi({
  description:
    "No invoice could be made for the renewal: the payments service's reason (a rail switched off, a price under the card processor's minimum at today's rate). It is asked again daily (a resume's payment hourly); the period lapses on time meanwhile",
});

/**
 * `subscription.past_due` and `subscription.payment_failed`: the period ended unpaid; the open renewal
 * stays payable until `pay_by` (the end of the grace period, then of the dunning window). `amount_fiat`
 * and `currency`: what the open renewal charges, when a card or wallet processor charges it.
 */
const DunningData = (status: 'past_due' | 'payment_failed') =>
  WebhookEventData.extend({
    subscription_id: z.string(),
    status: z.literal(status),
    pay_by: UnixSeconds.openapi({ description: 'Until when the renewal can still be paid before the next step' }),
    ...FiatCharged,
    ...RenewalPeriod,
    wallet_retries: z
      .literal(true)
      .optional()
      .openapi({ description: 'NWC: the connected wallet is asked to pay again during the grace period (after 1 h, then daily)' }),
    wallet_failed: z.literal(true).optional().openapi({ description: 'NWC: the connected wallet was asked to pay the renewal and did not' }),
    after_trial: z.literal(true).optional().openapi({ description: 'The period that ended unpaid was a free trial' }),
    renewal_refused: RenewalRefused,
    invoice_to_follow: z
      .literal(true)
      .optional()
      .openapi({ description: 'No invoice was made for the period yet (the scheduler was away): one follows at once, in a `renewal.reminder`' }),
    notify_subscriber: z.boolean().optional(),
  });

/**
 * The `reason` of `subscription.expired`, as billing writes it: what was left unpaid (a subscriber's
 * notice words each).
 */
export const EXPIRED_BECAUSE = {
  checkoutUnpaid: 'checkout unpaid for 24 hours',
  checkoutFailed: 'checkout could not be created',
  resumeUnpaid: 'renewal unpaid for 24 hours after the subscription was resumed',
  dunningOver: 'renewal unpaid at the end of the dunning window',
} as const;

/**
 * `subscription.expired`: a checkout unpaid for 24 h, a resumed subscription whose new period was not paid
 * within 24 h, or a subscription left `payment_failed` through the dunning window (these two with
 * `notify_subscriber` true). The contact may subscribe again.
 */
const SubscriptionExpiredData = WebhookEventData.extend({
  subscription_id: z.string(),
  status: z.literal('expired'),
  reason: z.string().openapi({ description: `One of: ${Object.values(EXPIRED_BECAUSE).join('; ')}` }),
  renewal_refused: RenewalRefused,
  notify_subscriber: z.boolean().optional(),
});

/**
 * Who cancelled a subscription, as billing knows it from where the cancel came in: the subscriber in the
 * portal, the owner through the API, or the owner archiving the plan. Never read from `cancel_reason`,
 * which is the owner's own free text when they cancel.
 */
export const CancelledBy = z.enum(['subscriber', 'merchant', 'plan_archived']);
export type CancelledBy = z.infer<typeof CancelledBy>;

/** `subscription.cancelled`: who cancelled, and until when access continues (`current_period_end`). */
const SubscriptionCancelledData = WebhookEventData.extend({
  subscription_id: z.string(),
  status: z.literal('cancelled'),
  cancelled_by: CancelledBy.optional().openapi({
    description: '`subscriber` (portal), `merchant` (the API), `plan_archived` (the plan was archived); absent from events older than it',
  }),
  cancel_reason: z
    .string()
    .optional()
    .openapi({ description: "The owner's note when they cancelled; `cancelled by subscriber` or `plan archived` for the other two" }),
  current_period_end: UnixSeconds.openapi({ description: 'Until when access continues (now or earlier: none remains)' }),
  in_trial: z.literal(true).optional().openapi({ description: 'Cancelled during its free trial (before `trial_end`)' }),
  never_paid: z.literal(true).optional().openapi({ description: 'No payment was ever applied to the subscription (a trial, or a checkout never paid)' }),
});

/**
 * What each event's data holds beyond (or instead of) the common fields. An event not named here carries
 * the common fields only, so a new event name fits as soon as it is in EventName; name it here when it
 * carries more (its schema, in the OpenAPI `webhooks` and in the tests, follows).
 */
const EVENT_DATA: { [K in EventName]?: z.ZodObject } = {
  'subscription.past_due': DunningData('past_due'),
  'subscription.payment_failed': DunningData('payment_failed'),
  'subscription.activated': PaidPeriodData,
  'subscription.renewed': PaidPeriodData,
  'subscription.trial_ending': WebhookEventData.extend({
    trial_end: UnixSeconds,
    wallet_pays: z.literal(true).optional().openapi({ description: 'NWC: the connected wallet will be asked to pay the first renewal' }),
    ...FiatCharged,
    ...RenewalPeriod,
  }),
  'renewal.reminder': WebhookEventData.extend({
    payment_id: Id.nullable(),
    due_at: UnixSeconds,
    trial_end: UnixSeconds.optional().openapi({
      description: "The period ending at `due_at` is a free trial: this reminder is the subscriber's trial-end notice too (see `subscription.trial_ending`)",
    }),
    pay_by: UnixSeconds.optional().openapi({
      description:
        '`past_due` and `payment_failed`: until when the renewal can still be paid at all (the end of the dunning window); after it the subscription expires. ' +
        'A `payment_failed` subscription an extend gave days keeps its window, so this can be before `due_at`',
    }),
    ...RenewalPeriod,
  }),
  'payment.received': WebhookEventData.extend({
    payment_id: Id,
    amount_sats: z.number().int(),
    ...FiatCharged,
    payment_method: z.string(),
    purpose: z.string(),
    status: z.literal('paid'),
  }),
  // From payments when a provider fails the payment for good; from nwc for each failed charge with the
  // subscriber's wallet (refused or left unanswered by it, or refused here without asking it; the payment
  // itself stays payable): then with the NWC fields below.
  'payment.failed': WebhookEventData.extend({
    payment_id: Id,
    amount_sats: z.number().int(),
    payment_method: z.string(),
    purpose: z.string(),
    status: z.literal('failed'),
    error_code: z.string().optional().openapi({ description: 'NWC: the NIP-47 error code of the failed charge (OTHER for no answer in time)' }),
    error_message: z.string().optional().openapi({ description: "NWC: the wallet's error message, or why the charge got no answer" }),
    attempt_id: z.string().optional().openapi({ description: 'NWC: the charge attempt; one event per attempt' }),
    wallet_asked: z
      .boolean()
      .optional()
      .openapi({ description: 'NWC: false when the charge was refused without asking the wallet (connection inactive, amount above its limit)' }),
    connection_id: Id.optional(),
    consecutive_failures: z.number().int().optional(),
    wallet_disabled: z.boolean().optional().openapi({ description: 'NWC: this failure deactivated the wallet (nwc.wallet_disabled follows)' }),
    may_still_pay: z
      .literal(true)
      .optional()
      .openapi({ description: 'NWC: no answer in time (or an error after which the wallet may still pay): a payment.received may follow in the next minutes' }),
  }),
  // One per subscription the archive cancelled (its subscriber named), or one for the plan alone when it
  // had none: the WebhookEvent's `subscription_id` is required, so that one carries an empty string.
  'plan.archived': WebhookEventData.extend({
    subscription_id: z.string().openapi({ description: "The subscription the archive cancelled; '' on the one event of a plan that had none" }),
    status: z.literal('archived'),
    cancelled_subscriptions: z.number().int().nonnegative(),
  }),
  'nwc.wallet_disabled': WebhookEventData.extend({
    status: z.literal('disabled'),
    connection_id: Id,
    wallet_pubkey: z.string(),
    error_code: z.string(),
    last_error: z.string(),
    consecutive_failures: z.number().int(),
  }),
  'payment.unapplied': PaymentUnappliedData,
  'subscription.expired': SubscriptionExpiredData,
  'subscription.cancelled': SubscriptionCancelledData,
};

export function eventDataSchema(name: EventName): z.ZodObject {
  return EVENT_DATA[name] ?? WebhookEventData;
}

/** The full payload of one event, as its webhook receives it (the OpenAPI `webhooks` describe each). */
export function eventSchema(name: EventName) {
  return z.object({ event: z.literal(name), timestamp: UnixSeconds, data: eventDataSchema(name) });
}

/** Any outgoing event payload; each event's own schema (eventSchema) says what its data holds. */
export const WebhookEvent = z
  .object({
    event: EventName,
    timestamp: UnixSeconds,
    data: WebhookEventData.extend({ subscription_id: z.string() }),
  })
  .openapi('WebhookEvent');
export type WebhookEvent = z.infer<typeof WebhookEvent>;

/**
 * What travels on JetStream: the WebhookEvent plus a stable id (also the JetStream message id) and its
 * tenant. The lone `plan.archived` of a plan that had no subscriptions has no `subscription_id` here (a
 * notifier of an earlier version would park an event with ''): its webhooks get '' (webhookBody).
 */
export const EventEnvelope = WebhookEvent.extend({
  data: WebhookEventData.extend({ subscription_id: Id.optional() }),
  id: Id,
  wallet_id: Id,
}).openapi('EventEnvelope');
export type EventEnvelope = z.infer<typeof EventEnvelope>;

/** The body an event's webhooks receive: the envelope without its id and tenant (the id is the webhook-id). */
export function webhookBody(e: EventEnvelope): WebhookEvent {
  const { subscription_id = '', ...data } = e.data;
  return { event: e.event, timestamp: e.timestamp, data: { subscription_id, ...data } };
}

export function eventSubject(name: EventName): string {
  return `events.${name}`;
}
