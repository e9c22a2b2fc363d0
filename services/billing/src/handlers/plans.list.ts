import type { Deps } from '../deps.js';
import { routeHandler, walletOf } from '@sb/runtime';

export const listPlans = (d: Deps) => routeHandler('plans.list', (req) => d.plans.list(d.db, walletOf(req), false, req.query.limit, req.query.offset));
