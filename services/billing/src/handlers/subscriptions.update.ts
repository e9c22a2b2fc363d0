import { conflict, notFound, routeHandler, unixSeconds, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { toSubscription } from '../store/subscriptions.repo.js';

/** Owner settings only (metadata, notification opt-ins): no lifecycle move, no event. */
export const updateSubscription = (d: Deps) =>
  routeHandler('subscriptions.update', async (req) => {
    const body = req.body;
    const sub = await d.subscriptions.get(d.db, walletOf(req), req.params.id);
    if (!sub) throw notFound('Subscription');
    const now = unixSeconds(d.clock);
    const next = {
      ...sub,
      metadata: body.metadata ?? sub.metadata,
      receive_reminders: body.receive_reminders ?? sub.receive_reminders,
      receive_confirmations: body.receive_confirmations ?? sub.receive_confirmations,
      updated_at: now,
    };
    if (!(await d.subscriptions.save(d.db, next))) throw conflict('Subscription was changed concurrently; retry');
    return toSubscription(next, now);
  });
