import { z } from './zod.js';
import { BusErrorReply } from './bus.js';
import { Id, Paginated, UnixSeconds } from './common.js';
import { NWC_ERROR_CODES, NWCSubscriptionCreate } from './nwc.js';
import { CheckoutResponse, Payment, PaymentPurpose, PaymentStatus, PortalPayment } from './payments.js';
import { PaymentMethod } from './plans.js';
import { SubscriptionStatus } from './subscriptions.js';

/**
 * Bus messages between services (not HTTP). Each names its subject, request and reply; both ends
 * validate against them.
 */

export const CreatePayment = z.object({
  wallet_id: Id,
  subscription_id: Id,
  plan_id: Id,
  plan_name: z.string(),
  amount_sats: z.number().int().positive(),
  payment_method: PaymentMethod,
  purpose: PaymentPurpose,
  description: z.string().max(640),
  /** When the payment stops being payable (checkout: 1 h for Lightning; renewal: end of grace). */
  expires_at: UnixSeconds,
  /** The same key returns the same payment: a retried renewal never creates a second one. */
  idempotency_key: z.string().min(1).max(200),
  /**
   * The caller made the key just now (a new subscription's first payment): no payment can hold it yet,
   * so the lookup before opening is skipped. A conflict on insert still answers the stored payment.
   */
  new_key: z.boolean().optional(),
  /**
   * The expired renewal payment this one replaces. Paid after all (its event not applied yet: billing
   * away, the bus slow), no replacement is made: the answer is a conflict, and the period is paid once.
   */
  replaces: Id.optional(),
  /** The plan's per-rail settings: the owner's watch-only wallet, connected card account, payee. */
  plan_settings: z
    .object({
      watchonly_wallet_id: z.string().nullable().optional(),
      cardproc_account_id: z.string().nullable().optional(),
      walletproc_merchant_id: z.string().nullable().optional(),
    })
    .optional(),
});
export type CreatePayment = z.infer<typeof CreatePayment>;

export const CreatedPayment = z.object({ payment: Payment, checkout: CheckoutResponse.omit({ manage_url: true }) });
export type CreatedPayment = z.infer<typeof CreatedPayment>;

/**
 * A renewal sweep's payments in one message (a bus round trip and a multi-row statement per batch,
 * not per renewal). Each request keeps its own idempotency key; each answer is that payment, or the
 * error its own `create_payment` would have raised, in request order.
 */
export const RENEWAL_BATCH_MAX = 100;
export const CreatePayments = z.object({ payments: z.array(CreatePayment).min(1).max(RENEWAL_BATCH_MAX) });
export const CreatedPayments = z.object({ results: z.array(z.union([CreatedPayment, BusErrorReply.pick({ error: true })])) });
export type CreatedPayments = z.infer<typeof CreatedPayments>;

export const SubscriptionRef = z.object({ wallet_id: Id, subscription_id: Id });
export type SubscriptionRef = z.infer<typeof SubscriptionRef>;

export const SubscriptionPaymentsQuery = SubscriptionRef.extend({
  /** Only those made for this (a checkout's invoices, not the renewals of the period it started). */
  purpose: PaymentPurpose.optional(),
  limit: z.number().int().min(1).max(200).default(50),
  offset: z.number().int().min(0).default(0),
});

export const DevPay = z.object({ payment_id: Id });

const Hex64 = z.string().regex(/^[0-9a-f]{64}$/, '64 lower-case hex characters');

/** The NWC service's subscribe: what `POST /public/subscribe` does for payment_method 'nwc' (the connection string stays in the NWC service). */
export const SubscribeNwc = NWCSubscriptionCreate.omit({ nwc_connection_string: true });
export const SubscribedNwc = z.object({
  subscription_id: Id,
  subscriber_id: Id,
  wallet_id: Id,
  plan_name: z.string(),
  /** The first payment for the wallet to pay; null for a plan with a free trial (the subscription is active). */
  payment: z.object({ id: Id, payment_request: z.string(), payment_hash: z.string(), amount_sats: z.number().int().positive() }).nullable(),
  manage_url: z.string().nullable().optional(),
  /** A plan with a free trial: its length and end, for the subscriber's answer (absent from an older billing). */
  trial: z.object({ days: z.number().int().positive(), end: z.number().int() }).optional(),
});
export type SubscribedNwc = z.infer<typeof SubscribedNwc>;

/**
 * What `nwc.internal.charge` answers: paid, or why not (NIP-47 error code; `deactivated` once the connection
 * gave up). `confirmed` false: the wallet answered a preimage the payments service could not check yet
 * (it was away); nwc gives it again until it can, and a preimage it refuses was no payment (absent: an
 * older nwc, confirmed). `may_still_pay`: no answer in time (or an error after which the wallet may still
 * pay): its payment may come in the next moments.
 */
export const NwcChargeResult = z.union([
  z.object({ paid: z.literal(true), confirmed: z.boolean().optional() }),
  z.object({ paid: z.literal(false), error_code: NWC_ERROR_CODES, deactivated: z.boolean(), may_still_pay: z.literal(true).optional() }),
  z.object({ paid: z.literal(false), no_connection: z.literal(true) }),
]);
export type NwcChargeResult = z.infer<typeof NwcChargeResult>;

const NwcReconnectRequest = z.object({ wallet_id: Id, subscriber_id: Id, subscription_id: Id, max_amount_sats: z.number().int().min(1).optional() });
const NwcReconnectReply = z.object({
  plan_id: Id,
  plan_name: z.string(),
  amount_sats: z.number().int(),
  subscriber_email: z.string().nullable(),
  subscriber_name: z.string().nullable(),
  /**
   * The subscription waits for its first payment: the NWC service asks `firstPaymentDue` for the invoice
   * the wallet just connected is to pay (absent from a billing of an earlier version: nothing is charged).
   */
  first_payment_due: z.boolean().optional(),
});

/**
 * A subscription's first invoice as the wallet connected for it in the portal would pay it: `due` (with
 * the invoice), `paid` already (billing has not applied it yet), `not_due` (not waiting for a first
 * payment any more), or `unpayable` and why (the plan withdrawn or no longer taking the method).
 */
const FirstPaymentDue = z.discriminatedUnion('state', [
  z.object({ state: z.literal('due'), payment: z.object({ id: Id, payment_request: z.string().min(1), amount_sats: z.number().int().positive() }) }),
  z.object({ state: z.literal('paid') }),
  z.object({ state: z.literal('not_due') }),
  z.object({ state: z.literal('unpayable'), reason: z.string() }),
]);

export const messages = {
  createPayment: { subject: 'payments.internal.create_payment', request: CreatePayment, reply: CreatedPayment },
  /**
   * Up to 100 payments opened 16 at a time, each at a provider that may take its PROVIDER_TIMEOUT_MS:
   * the caller waits for the batch instead of sending it again while payments still works on it.
   */
  createPayments: { subject: 'payments.internal.create_payments', request: CreatePayments, reply: CreatedPayments, timeoutMs: 60_000 },
  /**
   * Expire every pending payment of a subscription (cancel, plan archive, pending expiry), or only
   * `payment_id` (a renewal invoice replaced by a late payment of the one before it). `replaced_by`: the
   * payment that started the subscription instead (a checkout's invoices withdrawn for a late payment of
   * the contact's earlier checkout), which their status then names.
   */
  expireOpenPayments: {
    subject: 'payments.internal.expire_open',
    request: SubscriptionRef.extend({ payment_id: Id.optional(), replaced_by: Id.optional() }),
    reply: z.object({ expired: z.number().int().nonnegative() }),
  },
  /** Billing recorded a paid payment as not applied (e.g. late, and the subscription moved on): payments shows why. */
  markUnapplied: {
    subject: 'payments.internal.mark_unapplied',
    request: z.object({ wallet_id: Id, payment_id: Id, reason: z.string().min(1).max(500) }),
    reply: z.object({ marked: z.boolean() }),
  },
  /**
   * Billing applied a paid payment to a subscription: the public status says so, and the checkout page
   * says "active" only then (an answer of `paid` alone may yet turn out a refund case). Best effort.
   */
  markApplied: {
    subject: 'payments.internal.mark_applied',
    // The period it paid for (absent from an older billing): the payment and its receipt name it.
    request: z.object({ wallet_id: Id, payment_id: Id, period_start: UnixSeconds.optional(), period_end: UnixSeconds.optional() }),
    reply: z.object({ marked: z.boolean() }),
  },
  /**
   * Which payment methods this deployment takes (null) or why not (the sentence an owner or subscriber
   * sees, naming the setting), and whether on-chain plans must name a watch-only wallet. Billing asks
   * instead of reading the *_PROVIDER variables, so the two services cannot disagree.
   */
  paymentMethods: {
    subject: 'payments.internal.methods',
    request: z.object({}),
    reply: z.object({ methods: z.record(PaymentMethod, z.string().nullable()), watchonly_required: z.boolean() }),
  },
  /** One payment of the wallet by id, as the payments service has it now (null: no such payment of this wallet). */
  getPayment: {
    subject: 'payments.internal.get',
    request: z.object({ wallet_id: Id, id: Id }),
    reply: z.object({ payment: Payment.nullable() }),
  },
  listSubscriptionPayments: {
    subject: 'payments.internal.list_for_subscription',
    request: SubscriptionPaymentsQuery,
    reply: Paginated(Payment),
  },
  /** The portal's payment history: the payments of a subscriber's subscriptions (billing knows which), newest first. */
  listPortalPayments: {
    subject: 'payments.internal.list_portal_payments',
    request: z.object({
      wallet_id: Id,
      subscription_ids: z.array(Id).max(1000),
      limit: z.number().int().min(1).max(200).default(50),
      offset: z.number().int().min(0).default(0),
    }),
    reply: Paginated(PortalPayment),
  },
  /**
   * The checkout page's fiat price of a plan payable by card or wallet processor, at the current rate
   * (billing asks; no answer in time or no rate: the plan is shown in sats only).
   */
  fiatQuote: {
    subject: 'payments.internal.fiat_quote',
    request: z.object({ amount_sats: z.number().int().positive() }),
    reply: z.object({ amount: z.number(), currency: z.string() }),
    timeoutMs: 2000,
  },
  /** Billing asks before a plan names a watch-only wallet (ONCHAIN_PROVIDER=esplora): is it one of the owner's? */
  watchonlyWalletExists: {
    subject: 'payments.internal.watchonly_wallet_exists',
    request: z.object({ wallet_id: Id, id: Id }),
    reply: z.object({ exists: z.boolean() }),
  },
  /**
   * A Lightning payment proven by its preimage (an NWC wallet's answer): confirmed only when
   * sha256(preimage) is the payment hash, else 422 and nothing changes.
   */
  confirmPreimage: {
    subject: 'payments.internal.confirm_preimage',
    request: z.object({ payment_id: Id, preimage: Hex64 }),
    reply: z.object({ payment_id: Id, status: PaymentStatus, confirmed: z.boolean() }),
  },
  /** The notifier asks before a webhook endpoint names a plan: is it one of the owner's (archived ones too)? */
  planExists: {
    subject: 'billing.internal.plan_exists',
    request: z.object({ wallet_id: Id, id: Id }),
    reply: z.object({ exists: z.boolean() }),
  },
  /**
   * Whether a plan can be bought now (it exists and is not archived): the gateway asks before it serves a
   * checkout page, so that the page of no such plan is a 404. Only the plan's row: the public plan route
   * would also ask the notifier and payments for the page's courtesies, which the page then asks anyway.
   * `archived`, for a plan not offered: whether it existed (an address naming one of its payments is
   * still a page; an unknown plan's is a 404). An older billing leaves it out.
   */
  planOffered: {
    subject: 'billing.internal.plan_offered',
    request: z.object({ id: Id }),
    reply: z.object({ offered: z.boolean(), archived: z.boolean().optional() }),
  },
  subscribeNwc: { subject: 'billing.internal.subscribe_nwc', request: SubscribeNwc, reply: SubscribedNwc },
  /**
   * What `subscribeNwc` would refuse before writing anything (the plan, its methods, the wallet's limit,
   * the contacts), asked before the NWC service connects to the wallet's relay: a wrong plan is said as
   * such, and no relay is contacted for it. The same 404/422 as `subscribeNwc`, or `ok`.
   */
  subscribeNwcCheck: { subject: 'billing.internal.subscribe_nwc_check', request: SubscribeNwc, reply: z.object({ ok: z.literal(true) }) },
  /** The NWC service's portal resolves the subscriber of an X-Subscriber-Token through billing (404: unknown token). */
  subscriberOfToken: {
    subject: 'billing.internal.subscriber_of_token',
    request: z.object({ token_hash: z.string().min(1).max(128) }),
    reply: z.object({ subscriber_id: Id, wallet_id: Id }),
  },
  /**
   * Payments tells billing that a renewal payment ended before its time at the provider (the Checkout
   * Session expired, the card or PayPal capture was declined): billing issues its replacement on the next
   * scheduler pass, as when the payment's own expiry passes. Idempotent; `replaced` is false when the
   * payment is not the subscription's open renewal (any more).
   */
  renewalEnded: {
    subject: 'billing.internal.renewal_ended',
    request: SubscriptionRef.extend({ payment_id: Id }),
    reply: z.object({ replaced: z.boolean() }),
  },
  /**
   * The NWC service tells billing that a subscription's wallet is gone (disconnected or deactivated): it
   * renews by invoice from now on, with the usual lead time and reminders.
   */
  nwcFallback: {
    subject: 'billing.internal.nwc_fallback',
    request: SubscriptionRef,
    reply: z.object({ changed: z.boolean() }),
  },
  /**
   * A subscription's status as billing holds it: the NWC checkout asks after its wallet paid, so that its
   * "active" is what a read of the subscription says (billing applies the payment from its event).
   */
  subscriptionStatus: {
    subject: 'billing.internal.subscription_status',
    request: SubscriptionRef,
    /** `access_until`: as the subscription shows it (null: no access); absent from a billing older than it. */
    reply: z.object({ status: SubscriptionStatus, access_until: UnixSeconds.nullable().optional() }),
  },
  /**
   * The portal connects a wallet to one of the subscriber's NWC subscriptions: billing checks it is
   * theirs (404), live and made with NWC (409), within the wallet's limit (422), and has it renew from the wallet again.
   */
  nwcReconnect: {
    subject: 'billing.internal.nwc_reconnect',
    request: NwcReconnectRequest,
    reply: NwcReconnectReply,
  },
  /**
   * The checks of `nwcReconnect` alone, nothing changed: asked before the wallet the caller named is
   * contacted. A subject of its own, so that a billing of an earlier version (no responders) is told
   * apart from one that answers: a field on nwcReconnect would be dropped there and reconnect at once.
   */
  nwcReconnectCheck: {
    subject: 'billing.internal.nwc_reconnect_check',
    request: NwcReconnectRequest,
    reply: NwcReconnectReply,
  },
  /**
   * After a wallet is connected in the portal to a subscription waiting for its first payment: the invoice
   * it is to pay. A message of its own, asked after the connection is stored, so that a slow payments
   * service (billing makes the invoice there) delays the charge, not the connect.
   */
  firstPaymentDue: {
    subject: 'billing.internal.first_payment_due',
    // Billing may make the invoice at the payments service (and it at its provider); the NWC service stops
    // waiting earlier when the wallet's time to answer would run out (see payFirst).
    timeoutMs: 10_000,
    request: z.object({ wallet_id: Id, subscriber_id: Id, subscription_id: Id }),
    reply: FirstPaymentDue,
  },
  /** Billing's scheduler asks the NWC service to pay a renewal with the subscription's connected wallet. */
  nwcCharge: {
    subject: 'nwc.internal.charge',
    // The wallet has NWC_REPLY_TIMEOUT_MS (30 s) to answer.
    timeoutMs: 40_000,
    request: z.object({
      wallet_id: Id,
      subscription_id: Id,
      payment_id: Id,
      payment_request: z.string().min(1),
      amount_sats: z.number().int().positive(),
      /**
       * Until when (Unix ms) the caller waits for the answer (its own BUS_TIMEOUT_MS and this message's
       * wait, from sending it): a charge waiting for another attempt answers before then, and one whose
       * caller is gone already is not made. Absent (an older billing): the NWC service assumes its own
       * BUS_TIMEOUT_MS from when it handles the message.
       */
      answer_by: z.number().int().positive().optional(),
    }),
    reply: NwcChargeResult,
  },
} as const;

/**
 * Data of the `payment.received` / `payment.failed` events the payments service emits; billing applies
 * them to the subscription exactly once (keyed by payment_id).
 */
export const PaymentEventData = z.object({
  subscription_id: Id,
  plan_id: Id,
  plan_name: z.string(),
  payment_id: Id,
  amount_sats: z.number().int(),
  payment_method: PaymentMethod,
  purpose: PaymentPurpose,
  status: z.enum(['paid', 'failed']),
  paid_at: UnixSeconds.nullable().optional(),
  /** What a card or wallet-processor payment charged, in fiat (absent for bitcoin payments). */
  amount_fiat: z.number().nullable().optional(),
  currency: z.string().nullable().optional(),
});
export type PaymentEventData = z.infer<typeof PaymentEventData>;
