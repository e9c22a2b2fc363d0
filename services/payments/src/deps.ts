import type { AnsweredRequests, BusClient, Clock, Db, Logger } from '@sb/runtime';
import type { CheckGate } from './check-gate.js';
import type { Rails } from './providers/rail.js';
import type { ProviderDef } from './providers/registry.js';
import type { RateSource } from './rates.js';
import type { PaymentsRepo } from './store/payments.repo.js';
import type { WatchonlyRepo } from './store/watchonly.repo.js';

export const SCHEMA = 'payments';

/** What handlers need, passed in explicitly so tests can build them with a real database and a test clock. */
export interface Deps {
  db: Db;
  /** The only source of time in this service (the DEV_MODE test clock, or the system clock). */
  clock: Clock;
  log: Logger;
  devMode: boolean;
  payments: PaymentsRepo;
  /** Owners' watch-only wallets (on-chain addresses of ONCHAIN_PROVIDER=esplora). */
  watchonly: WatchonlyRepo;
  /** The answers of owner writes by Idempotency-Key (answerOnce), unsealed: they never name the key. */
  answered: AnsweredRequests;
  /** The rails this deployment has, by payment method (from the *_PROVIDER settings). */
  rails: Rails;
  /** The providers the configuration selected (providers/registry.ts). */
  providers: ProviderDef[];
  /** Prices card and wallet-processor payments in fiat. */
  rates: RateSource;
  /** The longest expiry of an invoice (INVOICE_MAX_EXPIRY_S). */
  invoiceMaxExpiryS: number;
  /** How often the public routes may have a payment checked with its provider. */
  checks: CheckGate;
  /** Requests to billing: only to tell it of a renewal payment a provider ended early. */
  bus: BusClient;
}
