import type { Clock, Db, DevClock, Logger } from '@sb/runtime';
import type { MethodAvailability } from './domain/plans.js';
import type { PlansRepo } from './store/plans.repo.js';

export const SCHEMA = 'billing';

/** What handlers need, passed in explicitly so tests can build them with a real database and a test clock. */
export interface Deps {
  db: Db;
  clock: Clock;
  /** Present in DEV_MODE only: the movable test clock. */
  devClock?: DevClock;
  log: Logger;
  availability: MethodAvailability;
  plans: PlansRepo;
}
