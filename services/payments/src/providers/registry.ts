import { API_PREFIX, checkoutPageUrl, type PaymentMethod } from '@sb/contracts';
import type { Clock, Logger } from '@sb/runtime';
import type { PaymentsConfig } from '../config.js';
import type { CallbackReader, CallbackRoute, PaymentLookup } from './callback.js';
import { StripeCardRail, stripeCallbacks, stripeSettings } from './cardproc.js';
import { ChargeprocProvider, chargeprocOnchainRail, chargeprocSettings } from './chargeproc.js';
import { DevLightningProvider, devRails } from './dev.js';
import type { LightningProvider } from './lightning.js';
import { LnbitsProvider, lnbitsSettings } from './lnbits.js';
import { esploraRail, esploraSettings, type ReceiveAddresses } from './onchain.js';
import { lightningRail, type PayerReturnUrl, type Rail, type Rails } from './rail.js';
import { PaypalClient, paypalCallbacks, paypalRail, paypalSettings } from './walletproc.js';

/** Every provider's own settings (each declared beside its adapter), for the payments configuration. */
export const PROVIDER_SETTINGS = { ...lnbitsSettings, ...chargeprocSettings, ...esploraSettings, ...stripeSettings, ...paypalSettings };

/** The variable that picks a provider for each rail (unset: that rail is off). */
export const RAIL_VARIABLES = ['LIGHTNING_PROVIDER', 'ONCHAIN_PROVIDER', 'CARDPROC_PROVIDER', 'WALLETPROC_PROVIDER'] as const;
export type RailVariable = (typeof RAIL_VARIABLES)[number];

/** What a provider's factory may use. */
export interface BuildContext {
  config: PaymentsConfig;
  clock: Clock;
  /** The dev provider's own bookkeeping: the status of one of its invoices. */
  devStatusOf: (ref: string) => Promise<string | undefined>;
  /** ONCHAIN_PROVIDER=esplora takes receive indexes of the owners' watch-only wallets (from the database). */
  watchonly?: ReceiveAddresses & { log: Pick<Logger, 'info'> };
}

/**
 * One payment provider, declared in one place: which `*_PROVIDER` value selects it, the variables it
 * cannot work without, the rails it serves, and how its callbacks are verified and read. Adding a
 * provider is its own module plus one entry here (CONTRIBUTING.md, "Add a payment provider").
 */
export interface ProviderDef {
  selectedBy: RailVariable;
  name: string;
  requires: readonly (keyof PaymentsConfig)[];
  build(ctx: BuildContext): Rail[];
  /** The callback route it answers and its reader (rails of the charge-server route need none: they are asked). */
  callback?: { route: CallbackRoute; reader(rails: Rails, payments: PaymentLookup, log: Logger): CallbackReader };
}

/** Where providers send their callbacks: the gateway's public charge-server webhook. */
export function webhookUrlOf(c: Pick<PaymentsConfig, 'PUBLIC_BASE_URL'>): string | undefined {
  return c.PUBLIC_BASE_URL ? `${c.PUBLIC_BASE_URL}${API_PREFIX}/public/webhook/chargeproc` : undefined;
}

function chargeprocOf({ config: c, clock }: BuildContext): ChargeprocProvider {
  return new ChargeprocProvider(
    {
      url: c.CHARGEPROC_URL!,
      apiKey: c.CHARGEPROC_API_KEY!,
      ...(c.CHARGEPROC_LNBITS_WALLET ? { lnbitsWallet: c.CHARGEPROC_LNBITS_WALLET } : {}),
      ...(c.CHARGEPROC_ONCHAIN_WALLET ? { onchainWallet: c.CHARGEPROC_ONCHAIN_WALLET } : {}),
      timeoutMs: c.PROVIDER_TIMEOUT_MS,
      ...(c.PUBLIC_BASE_URL ? { completeLink: c.PUBLIC_BASE_URL } : {}),
    },
    clock,
  );
}

/** NWC wallets pay invoices of the same Lightning provider. */
const lightningRails = (p: LightningProvider, ctx: BuildContext): Rail[] => {
  const hook = webhookUrlOf(ctx.config);
  return [lightningRail(p, hook), lightningRail(p, hook, 'nwc')];
};

/** The dev processors' "payment page" is the checkout page in its dev mode: a button that pays through the dev endpoint. */
const devRail = (method: PaymentMethod) => (ctx: BuildContext) => {
  const payUrl: PayerReturnUrl = (r) => `${checkoutPageUrl(ctx.config.PUBLIC_BASE_URL ?? '', r.plan_id, r.payment_id)}&processor=dev`;
  return devRails(ctx.clock, payUrl).filter((r) => r.method === method);
};

export const PROVIDERS: readonly ProviderDef[] = [
  { selectedBy: 'LIGHTNING_PROVIDER', name: 'dev', requires: [], build: (x) => lightningRails(new DevLightningProvider(x.clock, x.devStatusOf), x) },
  {
    selectedBy: 'LIGHTNING_PROVIDER',
    name: 'lnbits',
    requires: ['LNBITS_URL', 'LNBITS_INVOICE_KEY'],
    build: (x) =>
      lightningRails(
        new LnbitsProvider({ url: x.config.LNBITS_URL!, invoiceKey: x.config.LNBITS_INVOICE_KEY!, timeoutMs: x.config.PROVIDER_TIMEOUT_MS }, x.clock),
        x,
      ),
  },
  {
    selectedBy: 'LIGHTNING_PROVIDER',
    name: 'chargeproc',
    requires: ['CHARGEPROC_URL', 'CHARGEPROC_API_KEY', 'CHARGEPROC_LNBITS_WALLET'],
    build: (x) => lightningRails(chargeprocOf(x), x),
  },
  { selectedBy: 'ONCHAIN_PROVIDER', name: 'dev', requires: [], build: devRail('onchain') },
  {
    selectedBy: 'ONCHAIN_PROVIDER',
    name: 'chargeproc',
    requires: ['CHARGEPROC_URL', 'CHARGEPROC_API_KEY', 'CHARGEPROC_ONCHAIN_WALLET'],
    build: (x) => [
      chargeprocOnchainRail(chargeprocOf(x), {
        withLightning: !!x.config.CHARGEPROC_LNBITS_WALLET,
        webhookUrl: webhookUrlOf(x.config),
        lateWindowS: x.config.ONCHAIN_LATE_WINDOW_S,
        recheckAfterS: x.config.ONCHAIN_RECHECK_S,
      }),
    ],
  },
  {
    selectedBy: 'ONCHAIN_PROVIDER',
    name: 'esplora',
    requires: ['ESPLORA_URL'],
    build: ({ config: c, clock, watchonly }) => {
      if (!watchonly) throw new Error('ONCHAIN_PROVIDER=esplora needs the watch-only wallets');
      const settings = {
        url: c.ESPLORA_URL!,
        confirmations: c.ONCHAIN_CONFIRMATIONS,
        timeoutMs: c.PROVIDER_TIMEOUT_MS,
        lateWindowS: c.ONCHAIN_LATE_WINDOW_S,
        recheckAfterS: c.ONCHAIN_RECHECK_S,
      };
      return [esploraRail(settings, watchonly, clock, watchonly.log)];
    },
  },
  { selectedBy: 'CARDPROC_PROVIDER', name: 'dev', requires: [], build: devRail('cardproc') },
  {
    selectedBy: 'CARDPROC_PROVIDER',
    name: 'stripe',
    // Stripe refuses a Checkout Session without a success_url, which is built from PUBLIC_BASE_URL.
    requires: ['STRIPE_SECRET_KEY', 'STRIPE_WEBHOOK_SECRET', 'PUBLIC_BASE_URL'],
    build: ({ config: c, clock }) => [
      new StripeCardRail(
        {
          secretKey: c.STRIPE_SECRET_KEY!,
          webhookSecret: c.STRIPE_WEBHOOK_SECRET!,
          publicBaseUrl: c.PUBLIC_BASE_URL!,
          timeoutMs: c.PROVIDER_TIMEOUT_MS,
          ...(c.STRIPE_API_URL ? { apiUrl: c.STRIPE_API_URL } : {}),
        },
        clock,
      ),
    ],
    callback: { route: 'webhooks.cardproc', reader: stripeCallbacks },
  },
  { selectedBy: 'WALLETPROC_PROVIDER', name: 'dev', requires: [], build: devRail('walletproc') },
  {
    selectedBy: 'WALLETPROC_PROVIDER',
    name: 'paypal',
    // PayPal sends the payer back to return_url/cancel_url, which are built from PUBLIC_BASE_URL.
    requires: ['PAYPAL_CLIENT_ID', 'PAYPAL_CLIENT_SECRET', 'PAYPAL_WEBHOOK_ID', 'PUBLIC_BASE_URL'],
    build: ({ config: c, clock }) => {
      const client = new PaypalClient({
        apiUrl: c.PAYPAL_API_URL,
        clientId: c.PAYPAL_CLIENT_ID!,
        clientSecret: c.PAYPAL_CLIENT_SECRET!,
        webhookId: c.PAYPAL_WEBHOOK_ID!,
        timeoutMs: c.PROVIDER_TIMEOUT_MS,
        // The checkout page following the payment: paid, or not yet (cancelled at PayPal).
        returnUrl: (r) => checkoutPageUrl(c.PUBLIC_BASE_URL!, r.plan_id, r.payment_id),
      });
      return [paypalRail(client, clock)];
    },
    callback: { route: 'webhooks.walletproc', reader: paypalCallbacks },
  },
];

/** The providers the configuration selects, one per rail variable that is set. */
export function selectedProviders(c: Pick<PaymentsConfig, RailVariable>): ProviderDef[] {
  return PROVIDERS.filter((p) => c[p.selectedBy] === p.name);
}

/** The values each rail variable accepts, from the registry (the config schema's enums). */
export function providerNames(rail: RailVariable): [string, ...string[]] {
  const names = PROVIDERS.filter((p) => p.selectedBy === rail).map((p) => p.name);
  return names as [string, ...string[]];
}

/** One line per variable a selected provider needs and lacks. */
export function missingVariables(c: PaymentsConfig): string[] {
  return selectedProviders(c).flatMap((p) => p.requires.filter((k) => c[k] === undefined).map((k) => `  ${k}: required when ${p.selectedBy}=${p.name}`));
}

/** Every rail this deployment has, by payment method, built by the selected providers. */
export function createRails(ctx: BuildContext): Rails {
  return Object.fromEntries(selectedProviders(ctx.config).flatMap((p) => p.build(ctx).map((r) => [r.method, r])));
}
