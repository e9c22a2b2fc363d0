import { messages } from '@sb/contracts';
import { messageHandler, notFound, routeHandler, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';

export const getPlan = (d: Deps) =>
  routeHandler('plans.get', async (req) => {
    const plan = await d.plans.get(d.db, walletOf(req), req.params.id);
    if (!plan) throw notFound('Plan');
    const { version: _v, ...rest } = plan;
    return rest;
  });

/** Whether a plan (archived ones too) is the owner's: the notifier checks plan ids it is given. */
export const planExists = (d: Deps) => messageHandler(messages.planExists, async (req) => ({ exists: !!(await d.plans.get(d.db, req.wallet_id, req.id)) }));
