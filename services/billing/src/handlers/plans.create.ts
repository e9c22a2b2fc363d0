import { ID_PREFIXES } from '@sb/contracts';
import { newId, routeHandler, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { newPlan, requireWatchonlyFound, watchonlyToLookUp } from '../domain/plans.js';
import { watchonlyWalletExists } from '../payments-client.js';

export const createPlan = (d: Deps) =>
  routeHandler('plans.create', async (req) => {
    const now = d.clock.nowMs();
    const methods = await d.methods();
    const plan = newPlan(req.body, { id: newId(ID_PREFIXES.plan, now), wallet: walletOf(req), now: Math.floor(now / 1000) }, methods.availability);
    const lookUp = watchonlyToLookUp(plan, undefined, methods.watchonlyRequired);
    if (lookUp) requireWatchonlyFound(await watchonlyWalletExists(d, plan.wallet, lookUp));
    await d.plans.insert(d.db, plan);
    return plan;
  });
