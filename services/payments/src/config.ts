import { z } from 'zod';
import { commonConfig, envInt, envPort, loadConfig } from '@sb/runtime';
import { urlSetting as url } from './providers/http.js';
import { missingVariables, PROVIDER_SETTINGS, providerNames, RAIL_VARIABLES, type RailVariable } from './providers/registry.js';

/** Which provider serves each rail: the values come from the provider registry (providers/registry.ts). */
export const railSelection = Object.fromEntries(RAIL_VARIABLES.map((v) => [v, z.enum(providerNames(v)).optional()])) as Record<
  RailVariable,
  z.ZodOptional<z.ZodEnum<Record<string, string>>>
>;

export const paymentsConfig = {
  ...commonConfig,
  PAYMENTS_OPS_PORT: envPort(9102),
  /** How long a request to billing waits (telling it of a renewal payment a provider ended early). */
  BUS_TIMEOUT_MS: envInt(5000, 100),
  /** Unset: that rail is off and its payments are refused with 422. */
  ...railSelection,
  /** Each provider's own settings, declared in its module (providers/registry.ts gathers them). */
  ...PROVIDER_SETTINGS,
  /** Confirmations (the block holding it counts as one) before an on-chain payment counts as paid. */
  ONCHAIN_CONFIRMATIONS: envInt(1, 1),
  /** How long after its checkout expires an on-chain payment is still watched (seconds): a transaction can confirm late. */
  ONCHAIN_LATE_WINDOW_S: envInt(7 * 86_400, 0),
  /** No on-chain payment is asked about again sooner (seconds): blocks come every ~10 minutes and public Esplora servers rate-limit. */
  ONCHAIN_RECHECK_S: envInt(60, 1),
  /** Fiat of card and wallet-processor payments: lower-case ISO code. */
  FIAT_CURRENCY: z
    .string()
    .regex(/^[a-z]{3}$/, 'a lower-case three-letter code such as usd')
    .default('usd'),
  /** Price source answering `{"bitcoin": {"<currency>": <price>}}` (CoinGecko simple price). */
  FIAT_RATE_URL: url.optional(),
  /** A fixed price of one bitcoin in FIAT_CURRENCY instead of a source (dev runs). */
  FIAT_RATE_FIXED: z.coerce.number().positive().optional(),
  FIAT_RATE_TTL_MS: envInt(60_000, 0),
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

export function providerConfigProblems(c: PaymentsConfig): string[] {
  const problems = missingVariables(c);
  const fiat = [c.CARDPROC_PROVIDER && 'CARDPROC_PROVIDER', c.WALLETPROC_PROVIDER && 'WALLETPROC_PROVIDER'].filter(Boolean);
  if (fiat.length && c.FIAT_RATE_URL === undefined && c.FIAT_RATE_FIXED === undefined) {
    problems.push(`  FIAT_RATE_URL or FIAT_RATE_FIXED: required when ${fiat.join(' or ')} is set (fiat amounts)`);
  }
  return problems;
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
