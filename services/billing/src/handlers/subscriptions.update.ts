import { conflict, notFound, routeHandler, unixSeconds, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { toSubscription } from '../store/subscriptions.repo.js';

/**
 * Owner settings only (metadata, notification opt-ins): no lifecycle move, no event. The row is locked
 * while it is changed, as lifecycle moves lock it, so an update made beside them (or beside another
 * update) waits its turn instead of answering 409.
 */
export const updateSubscription = (d: Deps) =>
  routeHandler('subscriptions.update', (req) =>
    d.db.tx(async (tx) => {
      const body = req.body;
      const sub = await d.subscriptions.get(tx, walletOf(req), req.params.id, true);
      if (!sub) throw notFound('Subscription');
      const now = unixSeconds(d.clock);
      const next = {
        ...sub,
        metadata: body.metadata ?? sub.metadata,
        receive_reminders: body.receive_reminders ?? sub.receive_reminders,
        receive_confirmations: body.receive_confirmations ?? sub.receive_confirmations,
        updated_at: now,
      };
      if (!(await d.subscriptions.save(tx, next))) throw conflict('Subscription was changed concurrently; retry');
      return toSubscription(next, now);
    }),
  );
