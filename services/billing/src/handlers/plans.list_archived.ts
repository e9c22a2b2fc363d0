import type { Deps } from '../deps.js';
import { routeHandler, walletOf } from '@sb/runtime';

export const listArchivedPlans = (d: Deps) =>
  routeHandler('plans.archived.list', (req) => d.plans.list(d.db, walletOf(req), true, req.query.limit, req.query.offset));
