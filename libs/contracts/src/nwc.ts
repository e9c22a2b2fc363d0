import { z } from './zod.js';
import { emailAddress, Id, shownName, subscriberMessenger, UnixSeconds } from './common.js';
import { contactsUnchangedField } from './payments.js';

/** NIP-47 error codes; `error_code` of a failed NWC payment is one of them. */
export const NWC_ERROR_CODES = z
  .enum([
    'RATE_LIMITED',
    'NOT_IMPLEMENTED',
    'INSUFFICIENT_BALANCE',
    'QUOTA_EXCEEDED',
    'RESTRICTED',
    'UNAUTHORIZED',
    'INTERNAL',
    'UNSUPPORTED_ENCRYPTION',
    'OTHER',
    'PAYMENT_FAILED',
    'NOT_FOUND',
  ])
  .openapi('NWCErrorCode');
export const NWCErrorCode = NWC_ERROR_CODES;
export type NWCErrorCode = z.infer<typeof NWC_ERROR_CODES>;

const CONNECTION_STRING = { description: '`nostr+walletconnect://<pubkey>?relay=<url>&secret=<hex>`' };
// An empty string is an invalid one to validate, answered as any other (behaviour.md: `valid` false with a reason).
const anyConnectionString = z.string().max(2000).openapi(CONNECTION_STRING);
const connectionString = anyConnectionString.min(1);

export const NWCValidateRequest = z.strictObject({ nwc_string: anyConnectionString }).openapi('NWCValidateRequest');
export type NWCValidateRequest = z.infer<typeof NWCValidateRequest>;

export const NWCValidateResponse = z
  .object({
    valid: z.boolean(),
    error: z.string().nullable().optional().openapi({ description: 'Human-readable reason if invalid' }),
  })
  .openapi('NWCValidateResponse');
export type NWCValidateResponse = z.infer<typeof NWCValidateResponse>;

export const ContactPreference = z.enum(['email', 'messenger', 'nostr']).openapi('ContactPreference');
export type ContactPreference = z.infer<typeof ContactPreference>;

/** Body of `POST /public/subscribe/nwc`. */
export const NWCSubscriptionCreate = z
  .strictObject({
    plan_id: Id,
    email: emailAddress().optional(),
    name: shownName(z.string().max(200)).optional(),
    messenger: subscriberMessenger().optional(),
    nostr: z.string().max(200).optional().openapi({ description: 'npub or NIP-05' }),
    nwc_connection_string: connectionString,
    contact_preference: ContactPreference.optional().openapi({
      description: 'Preferred notification channel; the matching contact field should be given',
    }),
    max_amount_sats: z.number().int().min(1).optional().openapi({
      description: 'Upper bound of one automatic payment',
    }),
    receive_confirmations: z.boolean().default(true),
    receive_reminders: z.boolean().default(true),
  })
  .openapi('NWCSubscriptionCreate');
export type NWCSubscriptionCreate = z.infer<typeof NWCSubscriptionCreate>;

export const NWCSubscriptionResponse = z
  .object({
    subscription_id: Id,
    status: z.enum(['active', 'pending']),
    message: z.string(),
    error_code: NWC_ERROR_CODES.nullable().optional().openapi({ description: 'Present only if the payment failed' }),
    manage_url: z.string().nullable().optional().openapi({ description: 'Portal link; only when this request created the subscriber' }),
    contacts_unchanged: contactsUnchangedField,
    may_still_pay: z.literal(true).optional().openapi({
      description:
        'With error_code: the wallet did not answer in time (or answered an error after which it may still pay); a payment it makes in the next minutes activates the subscription',
    }),
  })
  .openapi('NWCSubscriptionResponse');
export type NWCSubscriptionResponse = z.infer<typeof NWCSubscriptionResponse>;

/**
 * The stored connection (nwc service). The secret is encrypted at rest in its own column and is not part
 * of this model: no endpoint or bus reply ever carries it.
 */
export const NWCConnection = z
  .object({
    id: Id,
    subscriber_id: Id,
    wallet_pubkey: z.string(),
    relay_url: z.string(),
    max_amount_sats: z.number().int().nullable().optional(),
    is_active: z.boolean(),
    last_used_at: UnixSeconds.nullable().optional(),
    last_error: z.string().nullable().optional(),
    consecutive_failures: z.number().int().nonnegative(),
    created_at: UnixSeconds,
    updated_at: UnixSeconds.nullable().optional(),
  })
  .openapi('NWCConnection');
export type NWCConnection = z.infer<typeof NWCConnection>;

/** Body of `POST /public/manage/wallets`: a wallet to pay one of the subscriber's NWC subscriptions from now on. */
export const NWCPortalConnect = z
  .strictObject({
    subscription_id: Id,
    nwc_connection_string: connectionString,
    max_amount_sats: z.number().int().min(1).optional().openapi({ description: 'Upper bound of one automatic payment' }),
  })
  .openapi('NWCPortalConnect');
export type NWCPortalConnect = z.infer<typeof NWCPortalConnect>;

/** A portal wallets list item: never the secret nor the full wallet pubkey. */
export const PortalWallet = z
  .object({
    id: Id,
    wallet_pubkey: z.string().max(8).openapi({ description: 'First 8 characters of the wallet pubkey (never the whole key)' }),
    relay_url: z.string(),
    max_amount_sats: z.number().int().nullable().optional(),
    is_active: z.boolean(),
    last_used_at: UnixSeconds.nullable().optional(),
    last_error: z.string().nullable().optional(),
    consecutive_failures: z.number().int().nonnegative(),
    created_at: UnixSeconds,
    subscription_id: Id.optional().openapi({ description: 'The subscription this wallet pays the renewals of' }),
    plan_name: z.string().optional().openapi({ description: "That subscription's plan, as named when the wallet was connected" }),
  })
  .openapi('PortalWallet');
export type PortalWallet = z.infer<typeof PortalWallet>;

/** The answer to a wallet connected in the portal: the wallet, and what it did with a first payment still due. */
export const PortalWalletConnected = PortalWallet.extend({
  first_payment: z
    .object({
      paid: z.boolean(),
      error_code: NWCErrorCode.optional(),
      message: z.string(),
    })
    .optional()
    .openapi({
      description:
        'The subscription was waiting for its first payment. `paid` true: it is paid (by this wallet, by the wallet connected before whose charge was in flight, or already before this request), `message` says which and what became of the subscription; ' +
        '`paid` false with the NIP-47 `error_code`: the wallet did not pay; without `error_code`: the wallet was not asked (no invoice could be had in time, no time left to wait for its answer, the plan no longer payable this way). ' +
        '`message` is a whole sentence for the subscriber, with what to do next. Absent when no first payment was due',
    }),
}).openapi('PortalWalletConnected');
export type PortalWalletConnected = z.infer<typeof PortalWalletConnected>;

export function toPortalWallet(c: NWCConnection, paysFor: { subscription_id: string; plan_name: string }): PortalWallet {
  return {
    subscription_id: paysFor.subscription_id,
    plan_name: paysFor.plan_name,
    id: c.id,
    wallet_pubkey: c.wallet_pubkey.slice(0, 8),
    relay_url: c.relay_url,
    max_amount_sats: c.max_amount_sats ?? null,
    is_active: c.is_active,
    last_used_at: c.last_used_at ?? null,
    last_error: c.last_error ?? null,
    consecutive_failures: c.consecutive_failures,
    created_at: c.created_at,
  };
}
