import { API_PREFIX } from '@sb/contracts';
import type { Clock } from '@sb/runtime';
import type { PaymentsConfig } from '../config.js';
import { ChargeprocProvider, chargeprocOnchainRail } from './chargeproc.js';
import { DevLightningProvider, devRails } from './dev.js';
import type { LightningProvider } from './lightning.js';
import { LnbitsProvider } from './lnbits.js';
import { lightningRail, type Rail, type Rails } from './rail.js';

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
export function createRails(c: PaymentsConfig, clock: Clock, devStatusOf: (ref: string) => Promise<string | undefined>): Rails {
  const rails: Rail[] = [];
  const webhookUrl = webhookUrlOf(c);
  const lightning = createLightningProvider(c, clock, devStatusOf);
  if (lightning) rails.push(lightningRail(lightning, webhookUrl));
  const devPayUrl = (id: string) => `${c.PUBLIC_BASE_URL ?? ''}${API_PREFIX}/dev/payments/${id}/pay`;
  const dev = devRails(clock, devPayUrl);
  const pick = (method: Rail['method']) => dev.find((r) => r.method === method)!;
  if (c.ONCHAIN_PROVIDER === 'dev') rails.push(pick('onchain'));
  if (c.ONCHAIN_PROVIDER === 'chargeproc') rails.push(chargeprocOnchainRail(chargeprocOf(c, clock), !!c.CHARGEPROC_LNBITS_WALLET, webhookUrl));
  if (c.CARDPROC_PROVIDER === 'dev') rails.push(pick('cardproc'));
  if (c.WALLETPROC_PROVIDER === 'dev') rails.push(pick('walletproc'));
  return Object.fromEntries(rails.map((r) => [r.method, r]));
}
