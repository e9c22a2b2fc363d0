import type { ProviderName } from '../domain/payments.js';
import { readBolt11 } from './bolt11.js';
import { ProviderUnavailableError } from './http.js';

export type LightningProviderName = Extract<ProviderName, 'dev' | 'lnbits' | 'chargeproc'>;

export interface CreateInvoiceInput {
  amount_sats: number;
  /** Shown to the payer (BOLT11 `d`, the charge's description). */
  memo: string;
  expiry_seconds: number;
  /** Where the provider announces the payment; absent when the deployment has no public URL. */
  webhook_url?: string;
}

export interface Invoice {
  payment_request: string;
  payment_hash: string;
  /** What the provider knows the payment by: the charge id (charge server) or the payment hash. */
  provider_ref: string;
  /** Unix seconds, from this service's clock. */
  expires_at: number;
  /** DEV PROVIDER only: the preimage, kept so a test wallet can pay the invoice and prove it (NWC). */
  dev_preimage?: string;
}

/** A Lightning payment provider as the payments service sees it. Each adapter speaks its provider's real wire format. */
export interface LightningProvider {
  readonly name: LightningProviderName;
  createInvoice(input: CreateInvoiceInput): Promise<Invoice>;
  /** Paid only when the provider says so for at least `amountSats` (the payment's own amount). */
  getStatus(providerRef: string, amountSats: number): Promise<{ paid: boolean }>;
}

/**
 * A provider's invoice is handed to the payer only when it charges what was asked, for the hash the
 * provider named (the one its status is asked by): a provider answering otherwise (misconfigured, or
 * not ours) is treated as unavailable, never as a smaller bill.
 */
export function checkInvoice(provider: string, inv: { payment_request: string; payment_hash: string }, amountSats: number): void {
  const read = readBolt11(inv.payment_request);
  if (!read) throw new ProviderUnavailableError(`${provider}: the answer's invoice is not a BOLT11 invoice`);
  if (read.msat !== BigInt(amountSats) * 1000n) {
    throw new ProviderUnavailableError(`${provider}: the invoice charges ${read.msat === null ? 'any amount' : `${read.msat} msat`}, not ${amountSats} sats`);
  }
  if (read.payment_hash !== inv.payment_hash.toLowerCase())
    throw new ProviderUnavailableError(`${provider}: the invoice's payment hash is not the one answered`);
}
