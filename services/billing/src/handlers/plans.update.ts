import { conflict, notFound, routeHandler, unixSeconds, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { requireWatchonlyFound, updatePlan, watchonlyToLookUp } from '../domain/plans.js';
import { watchonlyWalletExists } from '../payments-client.js';

export const updatePlanHandler = (d: Deps) =>
  routeHandler('plans.update', async (req) => {
    const current = await d.plans.get(d.db, walletOf(req), req.params.id);
    if (!current) throw notFound('Plan');
    const { version, ...plan } = current;
    const methods = await d.methods();
    const next = updatePlan(plan, req.body, unixSeconds(d.clock), methods.availability);
    const lookUp = watchonlyToLookUp(next, plan, methods.watchonlyRequired);
    if (lookUp) requireWatchonlyFound(await watchonlyWalletExists(d, plan.wallet, lookUp));
    if (!(await d.plans.update(d.db, next, version))) throw conflict('Plan was changed concurrently; retry');
    return next;
  });
