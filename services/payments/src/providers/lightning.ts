import type { ProviderName } from '../domain/payments.js';

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
  getStatus(providerRef: string): Promise<{ paid: boolean }>;
}
