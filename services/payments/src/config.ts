import { z } from 'zod';
import { commonConfig, envInt, loadConfig } from '@sb/runtime';

export const LIGHTNING_PROVIDERS = ['dev', 'lnbits', 'chargeproc'] as const;
export type LightningProviderName = (typeof LIGHTNING_PROVIDERS)[number];

const url = z.string().url({ message: 'must be an http(s):// URL' }).transform((u) => u.replace(/\/+$/, ''));
const secret = z.string().min(1);

export const paymentsConfig = {
  ...commonConfig,
  PAYMENTS_OPS_PORT: envInt(9102),
  DB_POOL_MAX: envInt(10, 1),
  /** Unset: Lightning is not configured and every payment is refused with 422. */
  LIGHTNING_PROVIDER: z.enum(LIGHTNING_PROVIDERS).optional(),
  LNBITS_URL: url.optional(),
  LNBITS_INVOICE_KEY: secret.optional(),
  CHARGEPROC_URL: url.optional(),
  CHARGEPROC_API_KEY: secret.optional(),
  CHARGEPROC_LNBITS_WALLET: secret.optional(),
  /** Where providers reach this deployment's gateway: the base of the callback URLs handed to them. */
  PUBLIC_BASE_URL: url.optional(),
  PAYMENTS_SWEEP_INTERVAL_MS: envInt(1000, 50),
  /**
   * No invoice is issued for longer than this (seconds). A renewal that stays payable longer (the grace
   * period) gets a fresh invoice from billing when this one expires: long-lived invoices outlive their
   * route hints and some wallets refuse them.
   */
  INVOICE_MAX_EXPIRY_S: envInt(86_400, 60),
  /** Each call to a provider gives up after this long (below the gateway's BUS_TIMEOUT_MS, so callers get a 503, not a timeout). */
  PROVIDER_TIMEOUT_MS: envInt(4000, 100),
};

export type PaymentsConfig = z.infer<z.ZodObject<typeof paymentsConfig>>;

/** Variables the chosen provider cannot work without. */
const REQUIRED: Record<LightningProviderName, (keyof PaymentsConfig)[]> = {
  dev: [],
  lnbits: ['LNBITS_URL', 'LNBITS_INVOICE_KEY'],
  chargeproc: ['CHARGEPROC_URL', 'CHARGEPROC_API_KEY', 'CHARGEPROC_LNBITS_WALLET'],
};

/** One line per variable the chosen provider needs and lacks. */
export function providerConfigProblems(c: PaymentsConfig): string[] {
  if (!c.LIGHTNING_PROVIDER) return [];
  return REQUIRED[c.LIGHTNING_PROVIDER]
    .filter((k) => c[k] === undefined)
    .map((k) => `  ${k}: required when LIGHTNING_PROVIDER=${c.LIGHTNING_PROVIDER}`);
}

export function loadPaymentsConfig(env: NodeJS.ProcessEnv = process.env): PaymentsConfig {
  const config = loadConfig(paymentsConfig, env);
  const problems = providerConfigProblems(config);
  if (problems.length) {
    process.stderr.write(`Invalid configuration:\n${problems.join('\n')}\n`);
    process.exit(1);
  }
  return config;
}
