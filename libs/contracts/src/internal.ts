import { z } from './zod.js';
import { Id, Paginated, UnixSeconds } from './common.js';
import { CheckoutResponse, Payment } from './payments.js';
import { PaymentMethod } from './plans.js';

/**
 * Bus messages between services (not HTTP). Each names its subject, request and reply; both ends
 * validate against them.
 */
export const PaymentPurpose = z.enum(['checkout', 'renewal']);
export type PaymentPurpose = z.infer<typeof PaymentPurpose>;

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

export const SubscriptionRef = z.object({ wallet_id: Id, subscription_id: Id });
export type SubscriptionRef = z.infer<typeof SubscriptionRef>;

export const SubscriptionPaymentsQuery = SubscriptionRef.extend({
  limit: z.number().int().min(1).max(200).default(50),
  offset: z.number().int().min(0).default(0),
});

export const DevPay = z.object({ payment_id: Id });

export const messages = {
  createPayment: { subject: 'payments.internal.create_payment', request: CreatePayment, reply: CreatedPayment },
  /**
   * Expire every pending payment of a subscription (cancel, plan archive, pending expiry), or only
   * `payment_id` (a renewal invoice replaced by a late payment of the one before it).
   */
  expireOpenPayments: {
    subject: 'payments.internal.expire_open',
    request: SubscriptionRef.extend({ payment_id: Id.optional() }),
    reply: z.object({ expired: z.number().int().nonnegative() }),
  },
  listSubscriptionPayments: {
    subject: 'payments.internal.list_for_subscription',
    request: SubscriptionPaymentsQuery,
    reply: Paginated(Payment),
  },
  /** Billing asks before a plan names a watch-only wallet (ONCHAIN_PROVIDER=esplora): is it one of the owner's? */
  watchonlyWalletExists: {
    subject: 'payments.internal.watchonly_wallet_exists',
    request: z.object({ wallet_id: Id, id: Id }),
    reply: z.object({ exists: z.boolean() }),
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
});
export type PaymentEventData = z.infer<typeof PaymentEventData>;
