import { notFound, routeHandler, unixSeconds, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { noticeSwitches } from '../domain/lifecycle.js';
import { toSubscription } from '../store/subscriptions.repo.js';
import { saveSettings } from '../transitions.js';

/**
 * The owner's settings of a subscription (metadata, notice opt-ins): see saveSettings. An ended one's
 * metadata stays the owner's to keep their records; its notice switches are frozen (noticeSwitches).
 */
export const updateSubscription = (d: Deps) =>
  routeHandler('subscriptions.update', (req) =>
    d.db.tx(async (tx) => {
      const body = req.body;
      const sub = await d.subscriptions.get(tx, walletOf(req), req.params.id, true);
      if (!sub) throw notFound('Subscription');
      const now = unixSeconds(d.clock);
      const next = await saveSettings(d, tx, sub, { metadata: body.metadata ?? sub.metadata, ...noticeSwitches(sub, body) }, now);
      return toSubscription(next, now);
    }),
  );
