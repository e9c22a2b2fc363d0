import { z } from './zod.js';
import { Id, PaginationQuery, QueryInt, someField, UnixSeconds } from './common.js';
import { Interval, PaymentMethod } from './plans.js';
import { Payment } from './payments.js';
import { CancelledBy } from './events.js';
import type { UnsubscribeLinkView } from './page-words.js';

export const SubscriptionStatus = z.enum(['pending', 'active', 'paused', 'past_due', 'payment_failed', 'cancelled', 'expired']).openapi('SubscriptionStatus');
export type SubscriptionStatus = z.infer<typeof SubscriptionStatus>;

/** Owner-defined key/value pairs on a subscription. */
export const MAX_METADATA_KEYS = 50;
export const Metadata = z
  .record(z.string().min(1).max(40), z.string().max(500))
  .refine((m) => Object.keys(m).length <= MAX_METADATA_KEYS, {
    message: `At most ${MAX_METADATA_KEYS} metadata keys`,
  })
  .openapi('Metadata', { description: 'At most 50 keys; key 1..40 chars, value up to 500 chars' });
export type Metadata = z.infer<typeof Metadata>;

const subscriptionFields = {
  id: Id,
  plan_id: Id,
  subscriber_id: Id,
  status: SubscriptionStatus,
  current_period_start: UnixSeconds,
  current_period_end: UnixSeconds,
  trial_end: UnixSeconds.nullable().optional(),
  cancelled_at: UnixSeconds.nullable().optional(),
  created_at: UnixSeconds,
  updated_at: UnixSeconds,
  payment_method: PaymentMethod,
  amount_sats: z.number().int().openapi({ description: 'Price snapshot taken when the subscription was created' }),
  interval: Interval.openapi({ description: 'Interval snapshot taken when the subscription was created' }),
  has_access: z.boolean().openapi({
    description: 'Derived: true while active or past_due, or paused/cancelled before current_period_end',
  }),
  cancel_reason: z.string().nullable().optional(),
  cancelled_by: CancelledBy.nullable().optional().openapi({
    description: 'Who cancelled: `subscriber` (portal), `merchant` (the API), `plan_archived` (the plan was archived); null while not cancelled',
  }),
  receive_confirmations: z.boolean().optional(),
  receive_reminders: z.boolean().optional(),
};

export const Subscription = z.object({ ...subscriptionFields, metadata: z.record(z.string(), z.string()).optional() }).openapi('Subscription');
export type Subscription = z.infer<typeof Subscription>;

/** `GET /subscriptions/{id}`: the subscription with its payment history (newest first). */
export const SubscriptionWithPayments = Subscription.extend({ payments: z.array(Payment) }).openapi('SubscriptionWithPayments');
export type SubscriptionWithPayments = z.infer<typeof SubscriptionWithPayments>;

/** Body of `PUT /subscriptions/{id}`. */
export const SubscriptionUpdate = someField(
  z.strictObject({
    metadata: Metadata.optional(),
    receive_reminders: z.boolean().optional(),
    receive_confirmations: z.boolean().optional(),
  }),
).openapi('SubscriptionUpdate', {
  description:
    'Subscription settings; at least one field. `metadata` replaces the stored metadata as a whole ' +
    '(at most 50 keys, key 1..40 chars, value up to 500 chars); `receive_reminders` and ' +
    '`receive_confirmations` switch the subscriber notifications of this subscription. Price, interval ' +
    'and status are not changed here.',
});
export type SubscriptionUpdate = z.infer<typeof SubscriptionUpdate>;

/** Body of the portal's `PATCH /public/manage/subscription/{id}`: the subscriber's own notice opt-ins. */
export const PortalSubscriptionUpdate = someField(
  z.strictObject({
    receive_reminders: z.boolean().optional().openapi({ description: 'Renewal reminders, trial endings and overdue notices' }),
    receive_confirmations: z.boolean().optional().openapi({ description: 'Confirmations and receipts (activation, renewal)' }),
  }),
).openapi('PortalSubscriptionUpdate', {
  description: 'Which notices of this subscription the subscriber gets; at least one field. Cancellations and plan archive notices are always sent.',
});
export type PortalSubscriptionUpdate = z.infer<typeof PortalSubscriptionUpdate>;

/** What a one-click unsubscribe token turns off. */
export const UnsubscribeKind = z.enum(['reminders', 'confirmations']);
export type UnsubscribeKind = z.infer<typeof UnsubscribeKind>;

/** `GET /public/unsubscribe/{token}` as JSON: what the link's POST would turn off, for the page that asks first. */
export const UnsubscribeLink = z
  .object({
    kind: UnsubscribeKind.openapi({ description: 'reminders: renewal due, trial ending; confirmations: subscription started, payment received' }),
    plan_name: z.string(),
    merchant_name: z.string().nullable().openapi({ description: "The name the merchant's messages are signed with; null when none is set" }),
    receiving: z.boolean().openapi({ description: 'Whether this kind of notice is still on (false: the link was used already, or the portal turned it off)' }),
    ended: z.boolean().optional().openapi({
      description:
        "The subscription has ended (cancelled or expired): its portal has no switches, so the page offers nothing to turn back on; the link's POST still turns its kind off",
    }),
  })
  .openapi('UnsubscribeLink');
export type UnsubscribeLink = z.infer<typeof UnsubscribeLink>;
// The pages' own view of it (page-words, kept free of zod) must accept what the route answers.
const _unsubscribeLinkView = (l: UnsubscribeLink): UnsubscribeLinkView => l;
void _unsubscribeLinkView;

/** Optional body of `POST /subscriptions/{id}/cancel`. */
export const CancelRequest = z
  .strictObject({
    reason: z.string().max(500).optional().openapi({ description: 'Stored for records' }),
    immediate: z.boolean().optional().openapi({
      description: 'true: access ends now; false or omitted: access continues until current_period_end',
    }),
  })
  .openapi('CancelRequest');
export type CancelRequest = z.infer<typeof CancelRequest>;

export const ExtendQuery = z.strictObject({
  days: QueryInt(1, 3650).openapi({ description: 'Free days added to current_period_end' }),
});
export type ExtendQuery = z.infer<typeof ExtendQuery>;

export const SubscriptionListQuery = PaginationQuery.extend({ status: SubscriptionStatus.optional() });
export type SubscriptionListQuery = z.infer<typeof SubscriptionListQuery>;

export const ManageLinkResponse = z
  .object({
    subscription_id: Id,
    subscriber_email: z.string().nullable().openapi({ description: 'null when the subscriber gave no email' }),
    manage_url: z.string().openapi({
      description: 'Shape `{base_url}/subscriptions_manager/manage?token=<subscriber_token>`',
    }),
  })
  .openapi('ManageLinkResponse');
export type ManageLinkResponse = z.infer<typeof ManageLinkResponse>;

/**
 * A portal list item: the subscription (price and interval snapshot, `has_access`) plus the plan name.
 * Never a wallet id; owner metadata is not shown to the subscriber.
 */
export const PortalSubscription = z
  .object({
    ...subscriptionFields,
    plan_name: z.string(),
    merchant_name: z.string().nullable().optional().openapi({
      description:
        "The seller, as the plan's messages name them (its notification settings' name, else the wallet's); absent when that could not be asked in time",
    }),
    notice_channels: z.array(z.string()).optional().openapi({
      description:
        "The channels the seller sends this plan's messages by (`email`, `messenger`, `nostr`) that reach this subscriber (they gave a contact for it); empty when none does; absent when that could not be asked in time",
    }),
    notice_kinds: z.array(UnsubscribeKind).optional().openapi({
      description:
        'The kinds of notice the seller sends for this plan (`reminders`, `confirmations`: what `receive_reminders` and `receive_confirmations` switch); absent when that could not be asked in time',
    }),
    access_until: UnixSeconds.nullable().optional().openapi({
      description: 'Until when access lasts unless a payment renews it: the period end, or while past_due the end of the grace period; null without access',
    }),
    access_after_cancel: UnixSeconds.nullable()
      .optional()
      .openapi({
        description:
          "Until when access would last if the subscriber cancelled now (the portal's cancel): the period end while it gives access; " +
          'null when cancelling ends access at once (past_due: the grace period is time to pay, not paid time), when there is none, or once it has ended',
      }),
    pay_by: UnixSeconds.nullable()
      .optional()
      .openapi({
        description:
          'While past_due or payment_failed: until when the renewal can still be paid to keep the subscription (the end of the dunning window; ' +
          'the open invoice may expire sooner and is then replaced); null otherwise',
      }),
    open_payment: Payment.nullable()
      .optional()
      .openapi({
        description:
          'The renewal payment the subscriber can pay now (its invoice or address), while one is open: also during payment_failed; ' +
          'null when none is open, absent when the payments service did not answer in time (the rest of the answer does not wait for it)',
      }),
    wallet_disconnected: z.boolean().optional().openapi({
      description:
        'A subscription made with NWC whose wallet was disconnected (or stopped paying): its renewals are paid by invoice until a wallet is connected again',
    }),
    ever_paid: z.boolean().optional().openapi({
      description: 'Whether a payment was ever applied to it (a checkout that ended unpaid, or a trial never paid for, never was)',
    }),
    in_trial: z.boolean().optional().openapi({
      description: "Whether its free trial runs now, by the service's clock (false once a paid period follows it, or the trial ended unpaid)",
    }),
    renewal_refused: z.boolean().optional().openapi({
      description:
        "Whether no invoice could be made for the renewal due now: the payments service refused it (a price under the card processor's minimum at today's rate, a payment method switched off); it is asked again later (daily; a resume's payment hourly) and appears in `open_payment` once made",
    }),
    renewal_overdue: z
      .boolean()
      .optional()
      .openapi({
        description:
          "Whether its renewal is overdue now, by the service's clock: payment_failed, or past_due after its period end (a past_due subscription " +
          'extended past today owes nothing until its new end)',
      }),
  })
  .openapi('PortalSubscription');
export type PortalSubscription = z.infer<typeof PortalSubscription>;
