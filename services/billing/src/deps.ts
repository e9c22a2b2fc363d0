import type { AnsweredRequests, BusClient, Clock, Db, DevClock, Logger, SecretBox } from '@sb/runtime';
import type { PaymentMethods } from './payments-client.js';
import type { SchedulePolicy } from './domain/schedule.js';
import type { AppliedPaymentsRepo } from './store/applied-payments.repo.js';
import type { PlansRepo } from './store/plans.repo.js';
import type { SubscribersRepo } from './store/subscribers.repo.js';
import type { SubscriptionsRepo } from './store/subscriptions.repo.js';

export const SCHEMA = 'billing';

/** What handlers need, passed in explicitly so tests can build them with a real database and a test clock. */
export interface Deps {
  db: Db;
  clock: Clock;
  /** Present in DEV_MODE only: the movable test clock. */
  devClock?: DevClock;
  log: Logger;
  /** What the payments service takes (asked, not configured here: the two cannot disagree). */
  methods: () => Promise<PaymentMethods>;
  plans: PlansRepo;
  subscriptions: SubscriptionsRepo;
  subscribers: SubscribersRepo;
  appliedPayments: AppliedPaymentsRepo;
  /** The answers of owner writes by Idempotency-Key (answerOnce). */
  answered: AnsweredRequests;
  /** The dunning window (DUNNING_DAYS): also bounds when a renewal paid late is still applied. */
  policy: SchedulePolicy;
  /** Requests to other services (payments). */
  bus: BusClient;
  /** Seals portal tokens so the owner's manage link can show them again. */
  secrets: SecretBox;
  /** Base of the portal links handed to subscribers. */
  publicBaseUrl: string;
  /** NIP05_ALLOW_HTTP (local tests): a subscriber's NIP-05 identifier may name a host and port. */
  localNip05?: boolean;
}
