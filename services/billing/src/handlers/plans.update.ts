import { conflict, notFound, routeHandler, unixSeconds, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { requireWatchonlyFound, updatePlan, watchonlyToLookUp } from '../domain/plans.js';
import { watchonlyWalletExists } from '../payments-client.js';

const ATTEMPTS = 20;

/**
 * A partial update, saved by compare-and-set on the plan's version. When another writer saved the plan in
 * between (two owners' edits of different fields at once), it is read and applied again, so both land;
 * only a plan that keeps changing under it, ATTEMPTS times, ends in 409. Not under a row lock: checking a watch-only
 * wallet asks the payments service.
 */
export const updatePlanHandler = (d: Deps) =>
  routeHandler('plans.update', async (req) => {
    for (let i = 0; i < ATTEMPTS; i++) {
      const current = await d.plans.get(d.db, walletOf(req), req.params.id);
      if (!current) throw notFound('Plan');
      const { version, ...plan } = current;
      const methods = await d.methods();
      const next = updatePlan(plan, req.body, unixSeconds(d.clock), methods.availability);
      const lookUp = watchonlyToLookUp(next, plan, methods.watchonlyRequired);
      if (lookUp) requireWatchonlyFound(await watchonlyWalletExists(d, plan.wallet, lookUp));
      if (await d.plans.update(d.db, next, version)) return next;
      // The writers that lost together try again spread out, not in step (found from outside: 48 edits
      // at once, a quarter of them ran out of tries).
      if (i + 1 < ATTEMPTS) await new Promise((r) => setTimeout(r, Math.random() * 5 * (i + 1)));
    }
    throw conflict('Plan was changed concurrently; retry');
  });
