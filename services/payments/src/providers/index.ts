import { API_PREFIX } from '@sb/contracts';
import type { Clock } from '@sb/runtime';
import type { PaymentsConfig } from '../config.js';
import { ChargeprocProvider } from './chargeproc.js';
import { DevLightningProvider } from './dev.js';
import type { LightningProvider } from './lightning.js';
import { LnbitsProvider } from './lnbits.js';

/** Where providers send their callbacks: the gateway's public charge-server webhook. */
export function webhookUrlOf(c: Pick<PaymentsConfig, 'PUBLIC_BASE_URL'>): string | undefined {
  return c.PUBLIC_BASE_URL ? `${c.PUBLIC_BASE_URL}${API_PREFIX}/public/webhook/chargeproc` : undefined;
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
      return new ChargeprocProvider(
        {
          url: c.CHARGEPROC_URL!,
          apiKey: c.CHARGEPROC_API_KEY!,
          lnbitsWallet: c.CHARGEPROC_LNBITS_WALLET!,
          timeoutMs: c.PROVIDER_TIMEOUT_MS,
          ...(c.PUBLIC_BASE_URL ? { completeLink: c.PUBLIC_BASE_URL } : {}),
        },
        clock,
      );
  }
}
