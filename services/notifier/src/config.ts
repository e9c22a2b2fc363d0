import { z } from 'zod';
import { commonConfig, envBool, envInt, loadConfig } from '@sb/runtime';

export const loadNotifierConfig = () =>
  loadConfig({
    ...commonConfig,
    NOTIFIER_OPS_PORT: envInt(9104),
    DB_POOL_MAX: envInt(10, 1),
    SECRETS_KEY: z.string().regex(/^[0-9a-fA-F]{64}$/, '32 bytes of hex (64 characters): encrypts webhook signing secrets at rest'),
    /** Each webhook POST gives up after this long and counts as a failed attempt. */
    WEBHOOK_TIMEOUT_MS: envInt(10_000, 100),
    /** Lets owners register webhook URLs on loopback, link-local and private addresses (local runs, tests). Off: refused (SSRF). */
    WEBHOOK_ALLOW_PRIVATE: envBool,
    /** How often the delivery and mail workers look for due work. */
    NOTIFIER_POLL_INTERVAL_MS: envInt(1000, 20),
    /** Outgoing mail server, e.g. smtp://user:pass@host:587 (smtps:// for implicit TLS). Unset: subscriber e-mails are not sent. */
    SMTP_URL: z.string().regex(/^smtps?:\/\//, 'must be an smtp:// or smtps:// URL').optional(),
    MAIL_FROM: z.string().min(3).default('Subscriptions <no-reply@localhost>'),
  });
export type NotifierConfig = ReturnType<typeof loadNotifierConfig>;
