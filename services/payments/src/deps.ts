import type { Clock, Db, Logger } from '@sb/runtime';
import type { LightningProvider } from './providers/lightning.js';
import type { PaymentsRepo } from './store/payments.repo.js';

export const SCHEMA = 'payments';

/** What handlers need, passed in explicitly so tests can build them with a real database and a test clock. */
export interface Deps {
  db: Db;
  /** The only source of time in this service (the DEV_MODE test clock, or the system clock). */
  clock: Clock;
  log: Logger;
  devMode: boolean;
  payments: PaymentsRepo;
  /** The configured Lightning provider; absent when LIGHTNING_PROVIDER is unset. */
  lightning?: LightningProvider;
  /** The callback URL handed to providers (`{PUBLIC_BASE_URL}{API_PREFIX}/public/webhook/chargeproc`). */
  webhookUrl?: string;
  /** The longest expiry of an invoice (INVOICE_MAX_EXPIRY_S). */
  invoiceMaxExpiryS: number;
}

/** The adapter that can speak about payments of `provider`, if this process has it configured. */
export function providerFor(d: Pick<Deps, 'lightning'>, provider: string): LightningProvider | undefined {
  return d.lightning?.name === provider ? d.lightning : undefined;
}
