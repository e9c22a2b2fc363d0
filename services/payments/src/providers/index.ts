import { API_PREFIX } from '@sb/contracts';
import type { Clock, Logger } from '@sb/runtime';
import type { PaymentsConfig } from '../config.js';
import { StripeCardRail } from './cardproc.js';
import { ChargeprocProvider, chargeprocOnchainRail } from './chargeproc.js';
import { DevLightningProvider, devRails } from './dev.js';
import type { LightningProvider } from './lightning.js';
import { LnbitsProvider } from './lnbits.js';
import { esploraRail, type AllocateIndex } from './onchain.js';
import { lightningRail, type Rail, type Rails } from './rail.js';
import { PaypalClient, paypalRail } from './walletproc.js';

/** Where providers send their callbacks: the gateway's public charge-server webhook. */
export function webhookUrlOf(c: Pick<PaymentsConfig, 'PUBLIC_BASE_URL'>): string | undefined {
  return c.PUBLIC_BASE_URL ? `${c.PUBLIC_BASE_URL}${API_PREFIX}/public/webhook/chargeproc` : undefined;
}

function chargeprocOf(c: PaymentsConfig, clock: Clock): ChargeprocProvider {
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

/** The adapter LIGHTNING_PROVIDER names (its variables were checked at config load). */
export function createLightningProvider(
  c: PaymentsConfig,
  clock: Clock,
  devStatusOf: (ref: string) => Promise<string | undefined>,
): LightningProvider | undefined {
  switch (c.LIGHTNING_PROVIDER) {
    case undefined:
      return undefined;
    case 'dev':
      return new DevLightningProvider(clock, devStatusOf);
    case 'lnbits':
      return new LnbitsProvider({ url: c.LNBITS_URL!, invoiceKey: c.LNBITS_INVOICE_KEY!, timeoutMs: c.PROVIDER_TIMEOUT_MS }, clock);
    case 'chargeproc':
      return chargeprocOf(c, clock);
  }
}

/**
 * Every rail this deployment has, by payment method, from the *_PROVIDER settings. A rail whose
 * provider is not built into this version is left out (its payments are refused with 422).
 */
export function createRails(
  c: PaymentsConfig,
  clock: Clock,
  devStatusOf: (ref: string) => Promise<string | undefined>,
  /** ONCHAIN_PROVIDER=esplora: takes receive indexes of the owners' watch-only wallets (from the database). */
  watchonly?: { allocate: AllocateIndex; log: Pick<Logger, 'info'> },
): Rails {
  const rails: Rail[] = [];
  const webhookUrl = webhookUrlOf(c);
  const lightning = createLightningProvider(c, clock, devStatusOf);
  // NWC wallets pay invoices of the same Lightning provider.
  if (lightning) rails.push(lightningRail(lightning, webhookUrl), lightningRail(lightning, webhookUrl, 'nwc'));
  const devPayUrl = (id: string) => `${c.PUBLIC_BASE_URL ?? ''}${API_PREFIX}/dev/payments/${id}/pay`;
  const dev = devRails(clock, devPayUrl);
  const pick = (method: Rail['method']) => dev.find((r) => r.method === method)!;
  if (c.ONCHAIN_PROVIDER === 'dev') rails.push(pick('onchain'));
  if (c.ONCHAIN_PROVIDER === 'chargeproc') {
    rails.push(
      chargeprocOnchainRail(chargeprocOf(c, clock), {
        withLightning: !!c.CHARGEPROC_LNBITS_WALLET,
        webhookUrl,
        lateWindowS: c.ONCHAIN_LATE_WINDOW_S,
        recheckAfterS: c.ONCHAIN_RECHECK_S,
      }),
    );
  }
  if (c.ONCHAIN_PROVIDER === 'esplora') {
    if (!watchonly) throw new Error('ONCHAIN_PROVIDER=esplora needs the watch-only wallets');
    const settings = {
      url: c.ESPLORA_URL!,
      confirmations: c.ONCHAIN_CONFIRMATIONS,
      timeoutMs: c.PROVIDER_TIMEOUT_MS,
      lateWindowS: c.ONCHAIN_LATE_WINDOW_S,
      recheckAfterS: c.ONCHAIN_RECHECK_S,
    };
    rails.push(esploraRail(settings, watchonly.allocate, clock, watchonly.log));
  }
  if (c.CARDPROC_PROVIDER === 'dev') rails.push(pick('cardproc'));
  if (c.CARDPROC_PROVIDER === 'stripe') {
    rails.push(
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
    );
  }
  if (c.WALLETPROC_PROVIDER === 'dev') rails.push(pick('walletproc'));
  if (c.WALLETPROC_PROVIDER === 'paypal') {
    // The payer comes back to the payment's public status; a shop front may send them on from there.
    const backTo = (id: string) => `${c.PUBLIC_BASE_URL}${API_PREFIX}/public/payment/${id}/status`;
    rails.push(
      paypalRail(
        new PaypalClient({
          apiUrl: c.PAYPAL_API_URL,
          clientId: c.PAYPAL_CLIENT_ID!,
          clientSecret: c.PAYPAL_CLIENT_SECRET!,
          webhookId: c.PAYPAL_WEBHOOK_ID!,
          timeoutMs: c.PROVIDER_TIMEOUT_MS,
          returnUrl: backTo,
          cancelUrl: backTo,
        }),
        clock,
      ),
    );
  }
  return Object.fromEntries(rails.map((r) => [r.method, r]));
}
