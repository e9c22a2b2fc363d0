import type { MethodAvailability } from './plans.js';

export interface ProviderSettings {
  lightningProvider?: 'dev' | 'lnbits' | 'chargeproc';
}

/**
 * Which payment methods this deployment can take. Only Lightning has a provider in this version; the
 * other rails name what they will need so an owner sees why a flag is refused.
 */
export function methodAvailability(s: ProviderSettings): MethodAvailability {
  const lightning = s.lightningProvider ? null : 'Lightning payments are not configured on this server (set LIGHTNING_PROVIDER)';
  return {
    lightning,
    nwc: lightning ?? 'NWC automatic payments are not configured on this server (NWC support is not installed)',
    onchain: 'On-chain payments are not configured on this server (no charge server or watch-only wallet provider is installed)',
    cardproc: 'Card payments are not configured on this server (no card processor credentials are installed)',
    walletproc: 'Wallet-processor payments are not configured on this server (no wallet processor credentials are installed)',
  };
}
