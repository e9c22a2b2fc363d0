import { notFound, conflict, enqueueEvent, unixSeconds } from '@sb/runtime';
import { SCHEMA, type Deps } from '../deps.js';
import { archivePlan } from '../domain/plans.js';
import { routeHandler, walletOf } from './route-handler.js';

/**
 * Archiving is idempotent: the first call flips the flag and records `plan.archived` in the same
 * transaction; later calls answer the archived plan and emit nothing. Subscriptions do not exist yet in
 * this service, so there is nothing to cancel and `cancelled_subscriptions` is 0.
 */
export const archivePlanHandler = (d: Deps) =>
  routeHandler('plans.archive', (req) =>
    d.db.tx(async (tx) => {
      const wallet = walletOf(req);
      const current = await d.plans.get(tx, wallet, req.params.id, true);
      if (!current) throw notFound('Plan');
      const { version, ...plan } = current;
      const now = unixSeconds(d.clock);
      const { plan: archived, changed } = archivePlan(plan, now);
      const cancelled = 0;
      if (changed) {
        if (!(await d.plans.update(tx, archived, version, now))) throw conflict('Plan was changed concurrently; retry');
        await enqueueEvent(tx, SCHEMA, d.clock, wallet, 'plan.archived', {
          plan_id: archived.id,
          plan_name: archived.name,
          amount_sats: archived.amount_sats,
          cancelled_subscriptions: cancelled,
        });
      }
      return { ...archived, cancelled_subscriptions: cancelled };
    }),
  );
