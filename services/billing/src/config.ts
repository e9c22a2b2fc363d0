import { z } from 'zod';
import { commonConfig, envBool, envInt, envPort, loadConfig } from '@sb/runtime';

export const loadBillingConfig = () =>
  loadConfig({
    ...commonConfig,
    BILLING_OPS_PORT: envPort(9101),
    SECRETS_KEY: z.string().regex(/^[0-9a-fA-F]{64}$/, '32 bytes of hex (64 characters): encrypts portal tokens at rest'),
    /** The base of the portal and checkout links people are sent: http(s) only (found from outside: ftp:// was taken). */
    PUBLIC_BASE_URL: z.url({ protocol: /^https?$/, error: 'must be an http(s):// URL' }).default('http://127.0.0.1:8080'),
    BUS_TIMEOUT_MS: envInt(5000, 100),
    SCHEDULER_INTERVAL_MS: envInt(5000, 50),
    /**
     * Due subscriptions handled at once by a sweep: each waits mostly on the payments service and the
     * database, not on this process's CPU, so more at once drain a backlog faster.
     */
    SCHEDULER_CONCURRENCY: envInt(32, 1),
    /** How long billing keeps the payments service's answer of which methods it takes (ms). */
    PAYMENT_METHODS_TTL_MS: envInt(30_000, 0),
    /** payment_failed lasts this long, with a payable renewal payment, before the subscription expires. */
    DUNNING_DAYS: envInt(14, 0),
    /** Local tests only, as in the notifier: a subscriber's NIP-05 identifier may be name@host:port. */
    NIP05_ALLOW_HTTP: envBool,
    /** Waits before each redelivery of a payment event that failed (ms, comma-separated); then it is parked. */
    EVENT_RETRY_DELAYS_MS: z
      .string()
      .regex(/^\d+(,\d+)*$/, 'comma-separated milliseconds, e.g. 1000,5000,30000')
      .transform((v) => v.split(',').map(Number))
      .optional(),
  });
