import type { BusClient, Clock, Db, Logger, SecretBox } from '@sb/runtime';
import type { AddressPolicy } from '@sb/runtime';
import type { EndpointsRepo } from './store/endpoints.repo.js';
import type { DeliveriesRepo } from './store/deliveries.repo.js';
import type { EmailsRepo } from './store/emails.repo.js';

export const SCHEMA = 'notifier';

/** What handlers and workers need, passed in explicitly. */
export interface Deps {
  db: Db;
  /** Plans live in billing: a plan id an owner gives is checked there. */
  bus: BusClient;
  /** The only source of time for scheduling (the DEV_MODE test clock, or the system clock). */
  clock: Clock;
  log: Logger;
  endpoints: EndpointsRepo;
  deliveries: DeliveriesRepo;
  emails: EmailsRepo;
  /** Seals webhook signing secrets at rest (they must be opened again to sign). */
  secrets: SecretBox;
  addresses: AddressPolicy;
  webhookTimeoutMs: number;
  /** Subscriber e-mail is recorded only when a mail server is configured. */
  mailEnabled: boolean;
}
