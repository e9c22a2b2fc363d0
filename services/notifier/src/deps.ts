import type { AnsweredRequests, BusClient, Clock, Db, Logger, SecretBox } from '@sb/runtime';
import type { AddressPolicy } from '@sb/runtime';
import type { EndpointsRepo } from './store/endpoints.repo.js';
import type { DeliveriesRepo } from './store/deliveries.repo.js';
import type { NotificationsRepo } from './store/notifications.repo.js';
import type { MessengerRepo } from './store/messenger.repo.js';
import type { SettingsRepo } from './store/settings.repo.js';
import type { NotifierMetrics } from './metrics.js';
import type { WalletNames } from './wallet-names.js';

export const SCHEMA = 'notifier';

/** What handlers and workers need, passed in explicitly. */
export interface Deps {
  db: Db;
  /** The only source of time for scheduling (the DEV_MODE test clock, or the system clock). */
  clock: Clock;
  log: Logger;
  endpoints: EndpointsRepo;
  deliveries: DeliveriesRepo;
  settings: SettingsRepo;
  notifications: NotificationsRepo;
  messenger: MessengerRepo;
  /** The answers of owner writes by Idempotency-Key (answerOnce). */
  answered: AnsweredRequests;
  /** Seals webhook signing secrets, channel secrets and message bodies at rest. */
  secrets: SecretBox;
  /** Calls to billing: a subscription's contacts and portal link, whether a plan id is the owner's. */
  bus: BusClient;
  /** Who signs and sends subscriber messages when the owner saved no merchant name. */
  walletNames: WalletNames;
  addresses: AddressPolicy;
  webhookTimeoutMs: number;
  metrics: NotifierMetrics;
  channels: {
    /** The deployment's mail server; owners may bring their own. */
    smtpUrl: string | undefined;
    mailFrom: string;
    messengerApiUrl: string;
    timeoutMs: number;
    nip05Http: boolean;
  };
}
