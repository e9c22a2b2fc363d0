import { z } from 'zod';
import { parseMailbox, SmtpUrl } from '@sb/contracts';
import { commonConfig, envBool, envInt, envPort, loadConfig } from '@sb/runtime';

export const loadNotifierConfig = () =>
  loadConfig({
    ...commonConfig,
    NOTIFIER_OPS_PORT: envPort(9104),
    SECRETS_KEY: z.string().regex(/^[0-9a-fA-F]{64}$/, '32 bytes of hex (64 characters): encrypts webhook signing secrets and channel secrets at rest'),
    /** Each webhook POST gives up after this long and counts as a failed attempt. */
    WEBHOOK_TIMEOUT_MS: envInt(10_000, 100),
    /** Lets owners register webhook URLs (and Nostr relays, NIP-05 domains) on loopback, link-local and private addresses (local runs, tests). Off: refused (SSRF). */
    WEBHOOK_ALLOW_PRIVATE: envBool,
    /** How often the delivery and notification workers look for due work. */
    NOTIFIER_POLL_INTERVAL_MS: envInt(1000, 20),
    /** Events turned into deliveries and notifications at once: those handled together are recorded in one transaction. */
    NOTIFIER_EVENT_CONCURRENCY: envInt(200, 1),
    /** Outgoing mail server, e.g. smtp://user:pass@host:587 (smtps:// for implicit TLS). Unset: only owners' own mail servers send e-mail. */
    SMTP_URL: SmtpUrl.optional(),
    /** The sender of every e-mail through SMTP_URL: one mailbox, as an owner's `from` must be (found from outside: anything was taken). */
    MAIL_FROM: z
      .string()
      .refine((v) => !!parseMailbox(v), 'must be one address: name@example.com or Name <name@example.com>')
      .default('Subscriptions <no-reply@localhost>'),
    /** The Telegram Bot API (tests point it at a local server of that protocol). */
    MESSENGER_API_URL: z.url({ protocol: /^https?$/ }).default('https://api.telegram.org'),
    /**
     * How often each configured bot is asked for chats that pressed Start (getUpdates), which link a
     * subscriber's Telegram username to the chat a bot can write to. 0: never (usernames then stay unreached).
     */
    MESSENGER_POLL_MS: envInt(5000, 0),
    /** One messenger call or one Nostr delivery (lookups and publishing) gives up after this long. */
    NOTIFY_TIMEOUT_MS: envInt(10_000, 100),
    /** NIP-05 identifiers are looked up over http:// (local tests only; the protocol says https). */
    NIP05_ALLOW_HTTP: envBool,
    /** The notifier's own calls to billing (a subscription's contacts, plan ownership). */
    BUS_TIMEOUT_MS: envInt(5000, 100),
  });
