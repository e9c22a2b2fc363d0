import { ID_PREFIXES } from '@sb/contracts';
import { answerOnce, newId, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { newPlan, requireWatchonlyFound, watchonlyToLookUp } from '../domain/plans.js';
import { watchonlyWalletExists } from '../payments-client.js';

export const createPlan = (d: Deps) =>
  answerOnce(d.answered, d.db, 'plans.create', async (req, keep) => {
    const now = d.clock.nowMs();
    const methods = await d.methods();
    const plan = newPlan(req.body, { id: newId(ID_PREFIXES.plan, now), wallet: walletOf(req), now: Math.floor(now / 1000) }, methods.availability);
    const lookUp = watchonlyToLookUp(plan, undefined, methods.watchonlyRequired);
    if (lookUp) requireWatchonlyFound(await watchonlyWalletExists(d, plan.wallet, lookUp));
    return keep.write(d.db, async (q) => {
      await d.plans.insert(q, plan);
      return plan;
    });
  });
