import type { RailSelection } from '@sb/runtime';
import type { MethodAvailability } from './plans.js';

/**
 * Which payment methods this deployment can take: null for a usable one, else the sentence an owner or
 * subscriber sees when asking for it (it names the setting that is missing).
 */
export function methodAvailability(s: RailSelection): MethodAvailability {
  const lightning = s.LIGHTNING_PROVIDER ? null : 'Lightning payments are not configured on this server (set LIGHTNING_PROVIDER)';
  return {
    lightning,
    // An NWC wallet pays invoices of the Lightning provider.
    nwc: s.LIGHTNING_PROVIDER ? null : 'NWC automatic payments need a Lightning provider for the invoices the wallets pay (set LIGHTNING_PROVIDER)',
    onchain: s.ONCHAIN_PROVIDER ? null : 'On-chain payments are not configured on this server (set ONCHAIN_PROVIDER)',
    cardproc: s.CARDPROC_PROVIDER ? null : 'Card payments are not configured on this server (set CARDPROC_PROVIDER and its credentials)',
    walletproc: s.WALLETPROC_PROVIDER ? null : 'Wallet-processor payments are not configured on this server (set WALLETPROC_PROVIDER and its credentials)',
  };
}
