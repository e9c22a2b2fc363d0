import type { CallbackRequest } from '@sb/contracts';
import type { PaymentRecord, ProviderName } from '../domain/payments.js';
import type { PaymentDetails } from '../store/payments.repo.js';

/** The callback routes a provider can answer (each a raw-body route of the contracts). */
export type CallbackRoute = 'webhooks.cardproc' | 'webhooks.walletproc' | 'webhooks.chargeproc';

/** What a callback says happened to its payment, asked only once the callback is known to be new. */
export type CallbackOutcome =
  | { paid: true; details?: PaymentDetails }
  | { failed: string }
  | { expired: true }
  /** `warning`: something the operator must look into (a paid answer for the wrong amount); logged, nothing changed. */
  | { nothing: true; warning?: string };

/** A verified callback about one of our payments. */
export interface CallbackEvent {
  payment: PaymentRecord;
  /** The provider's event id, recorded with the change so a redelivery changes nothing; absent where the outcome is the provider's own status of the payment (asking again is harmless). */
  eventId?: string;
  /** For the log: what kind of event it was. */
  label: string;
  outcome(): Promise<CallbackOutcome>;
}

/** How a provider's callbacks are verified and read. */
export interface CallbackReader {
  provider: ProviderName;
  /**
   * Verifies the callback before anything is read from it (throws `rejected` when it cannot be) and finds
   * the payment it is about; null for a genuine callback with nothing for us to do (another integration's
   * event, an event type we do not act on), which is acknowledged so the provider stops sending it.
   */
  read(body: CallbackRequest): Promise<CallbackEvent | null>;
}

/** The payment lookups a reader may use. */
export interface PaymentLookup {
  getById(id: string): Promise<PaymentRecord | undefined>;
  byProviderRef(provider: ProviderName, ref: string): Promise<PaymentRecord | undefined>;
}
