import { z } from './zod.js';
import { emailAddress, ENCODED_WORD, ENCODED_WORD_RULE, Id, NOT_IN_NAMES, PaginationQuery, shownName, telegram, UnixSeconds } from './common.js';
import { EventName } from './events.js';
import { ContactPreference } from './nwc.js';
import { UnsubscribeKind } from './subscriptions.js';

/** A notification channel; `messenger` is the Telegram Bot API, `nostr` NIP-17 direct messages. */
export const NotificationChannel = z.enum(['email', 'messenger', 'nostr']).openapi('NotificationChannel');
export type NotificationChannel = z.infer<typeof NotificationChannel>;

/** Every event an owner may be told about: the domain events, also ones only some versions emit. */
export const NotifiableEvent = z
  .enum([...new Set([...EventName.options, 'payment.unapplied', 'subscription.expired'])] as [string, ...string[]])
  .openapi('NotifiableEvent');
export type NotifiableEvent = z.infer<typeof NotifiableEvent>;

/**
 * Subscriber notices always sent, like cancellations (behaviour.md: the subscriber is notified when a
 * subscription expires after dunning and when their NWC wallet is deactivated). Still accepted in
 * `subscriber_events` from clients that list them (earlier versions offered them); never stored or shown there.
 */
export const ALWAYS_SENT_NOTICES: readonly string[] = ['subscription.expired', 'nwc.wallet_disabled'];

/**
 * The subscriber notices an owner can switch off. Cancellation (plan archive included), expiry after dunning
 * and a deactivated wallet always go out (ALWAYS_SENT_NOTICES); the subscriber's own opt-outs
 * (`receive_confirmations`, `receive_reminders`) apply on top.
 */
export const SubscriberNotice = z
  .enum([
    'subscription.created',
    'subscription.activated',
    'subscription.renewed',
    'payment.received',
    'renewal.reminder',
    'subscription.trial_ending',
    'subscription.past_due',
    'subscription.payment_failed',
    'subscription.expired',
    'nwc.wallet_disabled',
  ])
  .openapi('SubscriberNotice', {
    description: '`subscription.expired` and `nwc.wallet_disabled` are always sent: accepted in a list, never kept or shown in one',
  });
export type SubscriberNotice = z.infer<typeof SubscriberNotice>;
/** The notices `subscriber_events` switches (the default: all of them). */
export const SWITCHABLE_NOTICES = SubscriberNotice.options.filter((e) => !ALWAYS_SENT_NOTICES.includes(e));

/** What a secret field shows once stored: the secret itself is never answered. */
const CONFIGURED = z.literal('configured');
const relayUrl = z
  .string()
  .max(500)
  .regex(/^wss?:\/\/[^\s]+$/, 'must be a ws:// or wss:// relay URL');
/** A Nostr public key as npub or 64 hex. */
const nostrPubkey = z
  .string()
  .max(200)
  .regex(/^(npub1[02-9ac-hj-np-z]{58}|[0-9a-f]{64})$/, 'must be an npub or 64 hex characters');

/**
 * A mail server (an owner's, or the server's own SMTP_URL): smtp:// or smtps://, a host, an optional port and login, nothing else. A query
 * string would reach the mail library as transport options (sendmail with any program, logging of bodies,
 * a proxy past the address checks), so none is taken.
 */
export const SmtpUrl = z
  .string()
  .max(1000)
  .refine((v) => {
    if (!/^smtps?:\/\/[^\s/?#]+\/?$/.test(v)) return false;
    try {
      const u = new URL(v);
      // The user and password are sent decoded: a stray `%` would fail every message, not this request.
      decodeURIComponent(u.username);
      decodeURIComponent(u.password);
      return !!u.hostname && !u.search && !u.hash && (u.pathname === '' || u.pathname === '/');
    } catch {
      return false;
    }
  }, 'must be smtp:// or smtps:// with a host, optional port and user:password only (no path or query; a % in them written %25)');

/**
 * `Name <address>` or a bare address, split; undefined when it is not exactly one mailbox. A line break
 * in a sender would be a header of its own (Bcc: anyone) if any mail library let it through.
 */
export function parseMailbox(v: string): { name: string; address: string } | undefined {
  if (NOT_IN_NAMES.test(v)) return undefined;
  // The name: a quoted string (commas and escaped quotes allowed inside), or plain words.
  const m = /^\s*(?:"((?:[^"\\]|\\.)*)"|([^"<>,]*?))\s*<([^<>\s@,"]+@[^<>\s@,"]+)>\s*$/.exec(v);
  if (m) return { name: (m[1]?.replace(/\\(.)/g, '$1') ?? m[2]!).trim(), address: m[3]! };
  const bare = /^\s*([^<>\s@,"]+@[^<>\s@,"]+)\s*$/.exec(v);
  return bare ? { name: '', address: bare[1]! } : undefined;
}

const EmailChannelIn = z.strictObject({
  smtp_url: SmtpUrl.nullable().optional().openapi({
    description: "The owner's own mail server (secret: contains the password). Omitted: the one stored before, else the server's SMTP_URL; null: the server's",
  }),
  from: z
    .string()
    .min(3)
    .max(300)
    .refine((v) => !!parseMailbox(v), 'must be one address: name@example.com or Name <name@example.com>')
    .refine((v) => !ENCODED_WORD.test(v), ENCODED_WORD_RULE)
    .optional()
    .openapi({ description: 'Sender; the mail server must be allowed to send for it' }),
  owner_email: emailAddress().optional().openapi({ description: 'Where owner notices go by e-mail' }),
});
const MessengerChannelIn = z.strictObject({
  bot_token: z
    .string()
    .regex(/^\d{1,20}:[A-Za-z0-9_-]{20,100}$/, 'must be a bot token (<id>:<secret>)')
    .optional()
    .openapi({
      description: 'Bot API token (secret). Required the first time; omitted later: the stored one is kept',
    }),
  owner_chat_id: z.string().regex(telegram.ownerChat, `must be a numeric chat id or @channelusername (${telegram.rule})`).optional(),
});
const NostrChannelIn = z.strictObject({
  private_key: z
    .string()
    .max(200)
    .regex(/^(nsec1[02-9ac-hj-np-z]{58}|[0-9a-f]{64})$/, 'must be an nsec or 64 hex characters')
    .optional()
    .openapi({
      description: 'The sending key (secret). Omitted: the stored one is kept, or one is generated',
    }),
  generate_key: z.literal(true).optional().openapi({ description: 'Generate a new sending key; answered once as `generated_private_key`' }),
  relays: z.array(relayUrl).min(1).max(10),
  owner_pubkey: nostrPubkey.optional().openapi({ description: 'Where owner notices go as direct messages' }),
  nip04: z.boolean().default(false).openapi({ description: 'Send legacy NIP-04 (kind 4) messages instead of NIP-17, for older clients' }),
});

const settingsFields = {
  channels: z
    .strictObject({
      email: EmailChannelIn.nullable().optional(),
      messenger: MessengerChannelIn.nullable().optional(),
      nostr: NostrChannelIn.nullable().optional(),
    })
    .openapi({ description: 'A channel set to null (or left out) is off' }),
  merchant_name: shownName(z.string().trim().min(1).max(200)).optional().openapi({ description: 'Who the messages come from, named in every message' }),
  owner_events: z.array(NotifiableEvent).max(50).default([]),
  subscriber_events: z
    .array(SubscriberNotice)
    .max(50)
    .default([...SWITCHABLE_NOTICES]),
};

/** Body of `PUT /notification-settings`: replaces the wallet's defaults. */
export const NotificationSettingsUpdate = z.strictObject(settingsFields).openapi('NotificationSettingsUpdate');
export type NotificationSettingsUpdate = z.infer<typeof NotificationSettingsUpdate>;

/** Body of `PUT /plans/{id}/notification-settings`: inherit the wallet's, or a full override. */
// Told apart by `inherit`, so a wrong override names its field instead of an opaque union error.
export const PlanNotificationSettingsUpdate = z
  .discriminatedUnion('inherit', [z.strictObject({ inherit: z.literal(true) }), z.strictObject({ inherit: z.literal(false), ...settingsFields })], {
    // zod's own words ("Invalid discriminator value") name no fix (found from outside).
    error: (issue) =>
      issue.code === 'invalid_union' ? "inherit must be true (the wallet's settings apply) or false (the settings in this body apply)" : undefined,
  })
  .openapi('PlanNotificationSettingsUpdate');
export type PlanNotificationSettingsUpdate = z.infer<typeof PlanNotificationSettingsUpdate>;

export const NotificationSettings = z
  .object({
    channels: z.object({
      email: z
        .object({
          smtp_url: CONFIGURED.nullable().openapi({ description: "`configured`: the owner's own server; null: the server's" }),
          from: z.string().nullable(),
          owner_email: z.string().nullable(),
        })
        .nullable(),
      messenger: z.object({ bot_token: CONFIGURED, owner_chat_id: z.string().nullable() }).nullable(),
      nostr: z
        .object({
          private_key: CONFIGURED,
          public_key: z.string().openapi({ description: 'npub of the sending key' }),
          relays: z.array(z.string()),
          owner_pubkey: z.string().nullable(),
          nip04: z.boolean(),
        })
        .nullable(),
    }),
    merchant_name: z.string().nullable(),
    owner_events: z.array(NotifiableEvent),
    subscriber_events: z.array(SubscriberNotice),
    updated_at: UnixSeconds.nullable(),
    generated_private_key: z.string().optional().openapi({ description: 'The generated Nostr key (nsec), in the answer that generated it only' }),
  })
  .openapi('NotificationSettings');
export type NotificationSettings = z.infer<typeof NotificationSettings>;

export const PlanNotificationSettings = NotificationSettings.extend({
  plan_id: Id,
  inherit: z.boolean().openapi({ description: "true: the wallet's settings apply (shown here as in effect)" }),
}).openapi('PlanNotificationSettings');
export type PlanNotificationSettings = z.infer<typeof PlanNotificationSettings>;

export const NotificationTestRequest = z
  .strictObject({
    channel: NotificationChannel,
    to: z.string().min(1).max(254).optional().openapi({ description: "Recipient (e-mail, chat id, npub or NIP-05); omitted: the owner's own" }),
    plan_id: Id.optional().openapi({ description: "Send through the settings in effect for this plan (its override, if any); omitted: the wallet's" }),
  })
  .openapi('NotificationTestRequest');
export type NotificationTestRequest = z.infer<typeof NotificationTestRequest>;

export const NotificationTestResult = z
  .object({ channel: NotificationChannel, to: z.string(), delivered: z.boolean(), error: z.string().nullable() })
  .openapi('NotificationTestResult');
export type NotificationTestResult = z.infer<typeof NotificationTestResult>;

export const NotificationStatus = z.enum(['pending', 'delivered', 'failed']).openapi('NotificationStatus');

export const NotificationAttempt = z.object({
  attempted_at: UnixSeconds,
  error: z.string().nullable(),
  permanent: z.boolean(),
  duration_ms: z.number().int(),
});

export const Notification = z
  .object({
    id: Id,
    event_id: Id,
    event: z.string(),
    audience: z.enum(['subscriber', 'owner']),
    channel: NotificationChannel,
    recipient: z.string(),
    subscription_id: Id.nullable(),
    plan_id: Id.nullable(),
    subject: z.string(),
    status: NotificationStatus,
    attempt_count: z.number().int().nonnegative(),
    last_error: z.string().nullable(),
    next_attempt_at: UnixSeconds.nullable(),
    delivered_at: UnixSeconds.nullable(),
    created_at: UnixSeconds,
    attempts: z.array(NotificationAttempt),
  })
  .openapi('Notification');
export type Notification = z.infer<typeof Notification>;

export const NotificationListQuery = PaginationQuery.extend({
  channel: NotificationChannel.optional(),
  status: NotificationStatus.optional(),
  subscription_id: Id.optional(),
});
export type NotificationListQuery = z.infer<typeof NotificationListQuery>;

/** Bus messages of notifications between billing and the notifier. */
export const notificationMessages = {
  /** Billing's public plan asks which contact fields a checkout of this plan should offer (and whose name its messages carry). */
  contactMethods: {
    subject: 'notifier.internal.contact_methods',
    request: z.object({ wallet_id: Id, plan_id: Id }),
    reply: z.object({
      methods: z.array(ContactPreference),
      messenger_bot: z.string().optional(),
      /** The name the plan's subscriber messages are signed with (an unsubscribe link's page names it); absent from an older notifier. */
      merchant_name: z.string().nullable().optional(),
      /** The opt-ins under which the plan sends its subscribers at least one notice; absent from an older notifier. */
      notice_kinds: z.array(UnsubscribeKind).optional(),
    }),
  },
  /** The notifier asks billing whom a subscription's notices go to, and the subscriber's portal link. */
  subscriptionContact: {
    subject: 'billing.internal.subscription_contact',
    request: z.object({ wallet_id: Id, subscription_id: Id }),
    reply: z.object({
      email: z.string().nullable(),
      messenger: z.string().nullable(),
      nostr: z.string().nullable(),
      name: z.string().nullable(),
      contact_preference: ContactPreference.nullable(),
      manage_url: z.string(),
      /** One-click unsubscribe URLs (RFC 8058) per kind of notice; absent from a billing older than them. */
      unsubscribe_urls: z.object({ reminders: z.string(), confirmations: z.string() }).optional(),
      /** The plan's checkout page while the plan is offered (null once archived); absent from a billing older than it. */
      plan_checkout_url: z.string().nullable().optional(),
    }),
  },
  /**
   * The notifier asks the gateway for a wallet's name (given when the wallet was created): it names the
   * merchant in subscriber messages when the owner saved no `merchant_name`.
   */
  walletName: {
    subject: 'gateway.internal.wallet_name',
    request: z.object({ wallet_id: Id }),
    reply: z.object({ name: z.string() }),
  },
} as const;
