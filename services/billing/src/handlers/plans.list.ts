import type { Deps } from '../deps.js';
import { routeHandler, walletOf } from './route-handler.js';

export const listPlans = (d: Deps) =>
  routeHandler('plans.list', (req) => d.plans.list(d.db, walletOf(req), false, req.query.limit, req.query.offset));
