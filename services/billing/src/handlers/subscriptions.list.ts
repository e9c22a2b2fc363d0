import { routeHandler, unixSeconds, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { TERMINAL } from '../domain/lifecycle.js';
import { toSubscription } from '../store/subscriptions.repo.js';

export const listSubscriptions = (d: Deps) =>
  routeHandler('subscriptions.list', async (req) => {
    const page = await d.subscriptions.list(d.db, { wallet_id: walletOf(req), status: req.query.status }, req.query.limit, req.query.offset);
    const now = unixSeconds(d.clock);
    return { ...page, items: page.items.map((s) => toSubscription(s, now)) };
  });

/** The archive: subscriptions that ended (cancelled or expired). */
export const listArchivedSubscriptions = (d: Deps) =>
  routeHandler('subscriptions.archived.list', async (req) => {
    const page = await d.subscriptions.list(d.db, { wallet_id: walletOf(req), statuses: TERMINAL }, req.query.limit, req.query.offset);
    const now = unixSeconds(d.clock);
    return { ...page, items: page.items.map((s) => toSubscription(s, now)) };
  });
