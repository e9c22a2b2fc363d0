import { notFound } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { routeHandler, walletOf } from './route-handler.js';

export const getPlan = (d: Deps) =>
  routeHandler('plans.get', async (req) => {
    const plan = await d.plans.get(d.db, walletOf(req), req.params.id);
    if (!plan) throw notFound('Plan');
    const { version: _v, ...rest } = plan;
    return rest;
  });
