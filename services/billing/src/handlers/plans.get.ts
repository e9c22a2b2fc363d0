import { notFound, routeHandler, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';

export const getPlan = (d: Deps) =>
  routeHandler('plans.get', async (req) => {
    const plan = await d.plans.get(d.db, walletOf(req), req.params.id);
    if (!plan) throw notFound('Plan');
    const { version: _v, ...rest } = plan;
    return rest;
  });
