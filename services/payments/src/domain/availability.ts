import type { PaymentMethod } from '@sb/contracts';

/** For each payment method: null when this deployment takes it, else what configuration is missing. */
export type MethodAvailability = Record<PaymentMethod, string | null>;

/**
 * Which payment methods the rails this deployment built can take: null for a usable one, else the
 * sentence an owner or subscriber sees when asking for it (it names the setting that is missing).
 */
export function methodAvailability(has: (m: PaymentMethod) => boolean): MethodAvailability {
  return {
    lightning: has('lightning') ? null : 'Lightning payments are not configured on this server (set LIGHTNING_PROVIDER)',
    // An NWC wallet pays invoices of the Lightning provider.
    nwc: has('nwc') ? null : 'NWC automatic payments need a Lightning provider for the invoices the wallets pay (set LIGHTNING_PROVIDER)',
    onchain: has('onchain') ? null : 'On-chain payments are not configured on this server (set ONCHAIN_PROVIDER)',
    cardproc: has('cardproc') ? null : 'Card payments are not configured on this server (set CARDPROC_PROVIDER and its credentials)',
    walletproc: has('walletproc') ? null : 'Wallet-processor payments are not configured on this server (set WALLETPROC_PROVIDER and its credentials)',
  };
}
