import { z } from './zod.js';
import { Id, providerId, shownName, shownText, someField, UnixSeconds } from './common.js';

export const Interval = z.enum(['weekly', 'monthly', 'yearly']).openapi('Interval');
export type Interval = z.infer<typeof Interval>;

export const PaymentMethod = z.enum(['lightning', 'onchain', 'nwc', 'cardproc', 'walletproc']).openapi('PaymentMethod');
export type PaymentMethod = z.infer<typeof PaymentMethod>;

/** The plan flag that allows each payment method. */
export const METHOD_FLAGS = {
  lightning: 'allow_lightning',
  onchain: 'allow_onchain',
  nwc: 'allow_nwc',
  cardproc: 'allow_cardproc',
  walletproc: 'allow_walletproc',
} as const satisfies Record<PaymentMethod, string>;

export const MAX_AMOUNT_SATS = 2_100_000_000_000_000;

const planFields = {
  name: shownName(z.string().trim().min(1).max(200)),
  description: shownText(z.string().max(2000)),
  amount_sats: z.number().int().min(1).max(MAX_AMOUNT_SATS),
  interval: Interval,
  trial_days: z.number().int().min(0).max(365),
  grace_period_days: z.number().int().min(0).max(90),
  allow_lightning: z.boolean(),
  allow_onchain: z.boolean(),
  allow_nwc: z.boolean(),
  allow_cardproc: z.boolean(),
  allow_walletproc: z.boolean(),
  watchonly_wallet_id: Id.nullable(),
  cardproc_account_id: providerId(z.string().min(1).max(255)).nullable(),
  walletproc_merchant_id: providerId(z.string().min(1).max(255)).nullable(),
};

export const Plan = z
  .object({
    id: Id,
    wallet: Id,
    name: z.string(),
    description: z.string().nullable().optional(),
    amount_sats: z.number().int(),
    interval: Interval,
    trial_days: z.number().int(),
    grace_period_days: z.number().int(),
    allow_lightning: z.boolean(),
    allow_onchain: z.boolean(),
    allow_nwc: z.boolean(),
    allow_cardproc: z.boolean(),
    allow_walletproc: z.boolean(),
    watchonly_wallet_id: z.string().nullable().optional(),
    cardproc_account_id: z.string().nullable().optional(),
    walletproc_merchant_id: z.string().nullable().optional(),
    created_at: UnixSeconds,
    updated_at: UnixSeconds,
    is_deleted: z.boolean(),
  })
  .openapi('Plan');
export type Plan = z.infer<typeof Plan>;

/** A plan read back may be posted again: the fields a read answers with null take null (as absent). */
export const PlanCreate = z
  .strictObject({
    name: planFields.name,
    amount_sats: planFields.amount_sats,
    interval: planFields.interval,
    description: planFields.description.nullable().optional(),
    trial_days: planFields.trial_days.default(0),
    grace_period_days: planFields.grace_period_days.default(0),
    allow_lightning: planFields.allow_lightning.default(true),
    allow_onchain: planFields.allow_onchain.default(false),
    allow_nwc: planFields.allow_nwc.default(false),
    allow_cardproc: planFields.allow_cardproc.default(false),
    allow_walletproc: planFields.allow_walletproc.default(false),
    watchonly_wallet_id: planFields.watchonly_wallet_id.nullable().optional(),
    cardproc_account_id: planFields.cardproc_account_id.nullable().optional(),
    walletproc_merchant_id: planFields.walletproc_merchant_id.nullable().optional(),
  })
  .openapi('PlanCreate');
export type PlanCreate = z.infer<typeof PlanCreate>;

/** Only the fields to change, at least one; `description` and the provider ids may be cleared with null. */
export const PlanUpdate = someField(
  z.strictObject({
    name: planFields.name.optional(),
    amount_sats: planFields.amount_sats.optional(),
    interval: planFields.interval.optional(),
    description: planFields.description.nullable().optional(),
    trial_days: planFields.trial_days.optional(),
    grace_period_days: planFields.grace_period_days.optional(),
    allow_lightning: planFields.allow_lightning.optional(),
    allow_onchain: planFields.allow_onchain.optional(),
    allow_nwc: planFields.allow_nwc.optional(),
    allow_cardproc: planFields.allow_cardproc.optional(),
    allow_walletproc: planFields.allow_walletproc.optional(),
    watchonly_wallet_id: planFields.watchonly_wallet_id.optional(),
    cardproc_account_id: planFields.cardproc_account_id.optional(),
    walletproc_merchant_id: planFields.walletproc_merchant_id.optional(),
  }),
).openapi('PlanUpdate');
export type PlanUpdate = z.infer<typeof PlanUpdate>;

export const ArchivedPlan = Plan.extend({
  cancelled_subscriptions: z.number().int().nonnegative(),
}).openapi('ArchivedPlan');
export type ArchivedPlan = z.infer<typeof ArchivedPlan>;

/** What a would-be subscriber may see: no wallet, no provider account ids. */
export const PublicPlan = Plan.pick({
  id: true,
  name: true,
  description: true,
  amount_sats: true,
  interval: true,
  trial_days: true,
  grace_period_days: true,
  allow_lightning: true,
  allow_onchain: true,
  allow_nwc: true,
  allow_cardproc: true,
  allow_walletproc: true,
})
  .extend({
    payment_methods: z.array(PaymentMethod).openapi({
      description: 'Methods a subscriber can use now: allowed by the plan and configured on the server',
    }),
    available_contact_methods: z.array(z.enum(['email', 'messenger', 'nostr'])).openapi({
      description: 'Contact fields a checkout should ask for: the notification channels configured for this plan (e-mail when the notifier cannot be asked)',
    }),
    messenger_bot: z.string().optional().openapi({
      description:
        "The seller's Telegram bot (username, without @), when the messenger channel is on and the bot is known: a subscriber presses Start on it, then notices to their Telegram username reach them",
    }),
    merchant_name: z.string().optional().openapi({
      description:
        "The seller's name (the one its subscriber messages are signed with), when set in the notification settings: the checkout page names the seller",
    }),
  })
  .extend({
    checkout_url: z.string().openapi({ description: 'The hosted checkout page of this plan, to link subscribers to' }),
    fiat_price: z
      .object({ amount: z.number(), currency: z.string() })
      .optional()
      .openapi({ description: 'Price in fiat at the current rate, when the plan can be paid by card or wallet processor and a rate is available' }),
  })
  .openapi('PublicPlan');
export type PublicPlan = z.infer<typeof PublicPlan>;
