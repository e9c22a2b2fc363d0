import { z } from './zod.js';
import { emailAddress, Id, PaginationQuery, shownName, subscriberMessenger, UnixSeconds } from './common.js';
import { PaymentMethod } from './plans.js';

export const PaymentStatus = z.enum(['pending', 'paid', 'failed', 'expired']).openapi('PaymentStatus');
export type PaymentStatus = z.infer<typeof PaymentStatus>;

/**
 * `payment_method` as a client may send it: the canonical values plus `card`, an alias of `cardproc`.
 * Parsing always yields the canonical PaymentMethod, so responses always say `cardproc`.
 */
export const PaymentMethodInput = z
  .enum([...PaymentMethod.options, 'card'])
  .transform((v) => (v === 'card' ? 'cardproc' : v))
  .openapi('PaymentMethodInput', { description: '`card` is accepted as an alias of `cardproc`' });
export type PaymentMethodInput = z.input<typeof PaymentMethodInput>;

export const Payment = z
  .object({
    id: Id,
    subscription_id: Id,
    amount_sats: z.number().int(),
    amount_fiat: z.number().nullable().optional().openapi({ description: 'For card and wallet-processor payments' }),
    currency: z.string().nullable().optional().openapi({ description: 'Lower-case code, e.g. `eur`' }),
    status: PaymentStatus,
    payment_method: PaymentMethod,
    payment_request: z.string().nullable().optional().openapi({ description: 'Lightning invoice (BOLT11)' }),
    payment_hash: z.string().nullable().optional(),
    onchain_address: z.string().nullable().optional(),
    onchain_txid: z.string().nullable().optional(),
    cardproc_payment_id: z.string().nullable().optional(),
    walletproc_order_id: z.string().nullable().optional(),
    created_at: UnixSeconds,
    paid_at: UnixSeconds.nullable().optional(),
    unapplied_reason: z.string().optional().openapi({
      description:
        'Present when the payment was paid but could not be applied to any subscription (a late payment): why. The owner refunds it; a `payment.unapplied` event was sent.',
    }),
    period_start: UnixSeconds.optional().openapi({ description: 'For a paid payment applied to its subscription: the start of the period it paid for' }),
    period_end: UnixSeconds.optional().openapi({ description: 'For a paid payment applied to its subscription: the end of the period it paid for' }),
    replaced_by: Id.optional().openapi({
      description:
        "Present on a checkout payment withdrawn because another payment started its subscription (an earlier invoice of the checkout, or of the contact's earlier checkout, paid late): that payment's id. Nothing is due on this one",
    }),
  })
  .openapi('Payment');
export type Payment = z.infer<typeof Payment>;

export const PaymentListQuery = PaginationQuery.extend({
  subscription_id: Id.optional(),
  status: PaymentStatus.optional(),
  payment_method: PaymentMethodInput.optional(),
});
export type PaymentListQuery = z.infer<typeof PaymentListQuery>;

/**
 * A portal payments list item: the payment, the plan it paid for, and while it is pending what pays it
 * (the invoice, address / BIP21 URI or processor link) and until when.
 */
export const PortalPayment = Payment.extend({
  plan_name: z.string(),
  expires_at: UnixSeconds,
  checkout_url: z.string().nullable().optional().openapi({ description: 'Card or wallet-processor checkout link (pending payments)' }),
  bip21_uri: z.string().nullable().optional().openapi({ description: 'BIP21 URI of an on-chain payment' }),
}).openapi('PortalPayment');
export type PortalPayment = z.infer<typeof PortalPayment>;

/** Body of `POST /public/subscribe`. */
export const SubscribeRequest = z
  .strictObject({
    plan_id: Id,
    payment_method: PaymentMethodInput.openapi({
      description:
        "One of the plan's `payment_methods` (`card` is an alias of `cardproc`). `nwc` is always refused here with 422 " +
        "(loc `body.payment_method`) naming `POST /public/subscribe/nwc`, which takes the wallet's connection string.",
    }),
    email: emailAddress().optional(),
    name: shownName(z.string().max(200)).optional(),
    messenger: subscriberMessenger().optional(),
    nostr: z.string().max(200).optional().openapi({ description: 'npub, a public key of 64 hex characters, or a NIP-05 identifier (name@domain)' }),
    contact_preference: z.enum(['email', 'messenger', 'nostr']).optional().openapi({
      description: 'Preferred notification channel; the matching contact field must be given',
    }),
    receive_confirmations: z.boolean().default(true),
    receive_reminders: z.boolean().default(true),
  })
  .openapi('SubscribeRequest');
export type SubscribeRequest = z.infer<typeof SubscribeRequest>;
export type SubscribeRequestInput = z.input<typeof SubscribeRequest>;

/** `manage_url` is present only when this request created the subscriber (never an existing subscriber's token). */
const manageUrl = z.string().nullable().optional().openapi({ description: 'Portal link; only when this request created the subscriber' });
/** A returning subscriber's checkout: the other contact details given were not stored (page-words CONTACTS_UNCHANGED). */
export const contactsUnchangedField = z.literal(true).optional().openapi({
  description:
    "True when the e-mail is a known subscriber's and the request gave other contact details (name, messenger, nostr, preference): they were not stored; the subscriber changes them in the portal",
});

export const CheckoutResponse = z
  .object({
    payment_id: Id.openapi({ description: 'Poll `/public/payment/{id}/status` with it' }),
    payment_method: PaymentMethod,
    subscription_id: Id.nullable().optional(),
    payment_request: z.string().nullable().optional().openapi({ description: 'BOLT11 invoice' }),
    payment_hash: z.string().nullable().optional(),
    onchain_address: z.string().nullable().optional(),
    chargeproc_charge_id: z.string().nullable().optional().openapi({ description: 'Charge id at the charge server' }),
    bip21_uri: z.string().nullable().optional().openapi({ description: 'BIP21 unified payment URI' }),
    checkout_url: z.string().nullable().optional().openapi({ description: 'Redirect URL for fiat checkout' }),
    amount_fiat: z.number().nullable().optional().openapi({ description: 'Price in fiat of a card or wallet-processor checkout' }),
    currency: z.string().nullable().optional().openapi({ description: 'Lower-case code of amount_fiat, e.g. `usd`' }),
    qr_codes: z.record(z.string(), z.string()).nullable().optional().openapi({ description: 'SVG strings keyed by mode: `lightning`, `onchain`, `bip21`' }),
    expires_at: UnixSeconds,
    manage_url: manageUrl,
    contacts_unchanged: contactsUnchangedField,
  })
  .openapi('CheckoutResponse');
export type CheckoutResponse = z.infer<typeof CheckoutResponse>;

export const TrialSubscriptionResponse = z
  .object({
    subscription_id: Id,
    status: z.literal('active'),
    trial: z.literal(true),
    trial_days: z.number().int(),
    trial_end: UnixSeconds.optional().openapi({ description: 'When the trial ends and the first payment is due' }),
    message: z.string(),
    manage_url: manageUrl,
    contacts_unchanged: contactsUnchangedField,
  })
  .openapi('TrialSubscriptionResponse');
export type TrialSubscriptionResponse = z.infer<typeof TrialSubscriptionResponse>;

/** CheckoutResponse for paid plans, TrialSubscriptionResponse for plans with a free trial. */
export const SubscribeResponse = z.union([CheckoutResponse, TrialSubscriptionResponse]).openapi('SubscribeResponse');
export type SubscribeResponse = z.infer<typeof SubscribeResponse>;

/** What a payment is for: a subscription's first payment (its checkout), or a renewal. */
export const PaymentPurpose = z.enum(['checkout', 'renewal']);
export type PaymentPurpose = z.infer<typeof PaymentPurpose>;

export const PaymentStatusResponse = z
  .object({
    payment_id: Id,
    status: z.enum(['pending', 'paid', 'expired', 'failed']),
    paid_at: UnixSeconds.nullable().optional(),
    subscription_id: Id,
    plan_id: Id.optional().openapi({ description: "The plan the payment is for (the checkout page checks a payment link names its plan's)" }),
    unapplied: z.boolean().optional().openapi({
      description: 'True for a payment that arrived after its subscription had ended (or its plan was withdrawn): the seller is told to refund it',
    }),
    purpose: PaymentPurpose.optional().openapi({
      description: "What the payment is for: a subscription's first payment (its checkout), or a renewal. The checkout page's words differ",
    }),
    applied: z.boolean().optional().openapi({
      description:
        'For a paid payment: true once it was applied to its subscription, false while that is not decided yet (the moments after it is paid); absent when `unapplied` is true, and for a payment not paid',
    }),
    replaced_by: Id.optional().openapi({
      description:
        "For an expired checkout payment withdrawn because another payment started its subscription (an earlier invoice of the checkout, or of the contact's earlier checkout, paid late): that payment, whose status says the subscription started",
    }),
  })
  .openapi('PaymentStatusResponse');
export type PaymentStatusResponse = z.infer<typeof PaymentStatusResponse>;

/** Answer of the three provider callbacks once the confirmation is durably recorded (or was a duplicate). */
export const CallbackAck = z.object({ received: z.boolean() }).openapi('CallbackAck');
export type CallbackAck = z.infer<typeof CallbackAck>;

/**
 * Bus message (not an HTTP schema) the gateway sends on a provider callback's subject, in place of the
 * usual `body`: the callbacks are verified on the exact bytes received (signatures), so the gateway
 * passes them through untouched. `raw` is the base64 of the raw body (empty for a body-less GET);
 * `headers` are lower-cased names. The charge server calls with GET by default.
 */
export const CallbackRequest = z.object({
  raw: z.string(),
  headers: z.record(z.string(), z.string()),
  method: z.enum(['GET', 'POST']),
});
export type CallbackRequest = z.infer<typeof CallbackRequest>;
