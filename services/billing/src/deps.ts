import type { Clock, Db, Logger } from '@sb/runtime';
import type { MethodAvailability } from './domain/plans.js';
import type { PlansRepo } from './store/plans.repo.js';

export const SCHEMA = 'billing';

/** What handlers need, passed in explicitly so tests can build them with a real database and a test clock. */
export interface Deps {
  db: Db;
  clock: Clock;
  log: Logger;
  availability: MethodAvailability;
  plans: PlansRepo;
}
