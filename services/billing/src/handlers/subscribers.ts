import { notFound, routeHandler, unixSeconds, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { publicSubscriber } from '../store/subscribers.repo.js';
import { toSubscription } from '../store/subscriptions.repo.js';

export const listSubscribers = (d: Deps) =>
  routeHandler('subscribers.list', async (req) => {
    const page = await d.subscribers.list(d.db, walletOf(req), { search: req.query.search }, req.query.limit, req.query.offset);
    return { ...page, items: page.items.map(publicSubscriber) };
  });

export const getSubscriber = (d: Deps) =>
  routeHandler('subscribers.get', async (req) => {
    const s = await d.subscribers.get(d.db, walletOf(req), req.params.id);
    if (!s) throw notFound('Subscriber');
    const subs = await d.subscriptions.list(d.db, { wallet_id: s.wallet_id, subscriber_id: s.id }, 200, 0);
    const now = unixSeconds(d.clock);
    return { ...publicSubscriber(s), subscriptions: subs.items.map((x) => toSubscription(x, now)) };
  });

export const listPlanSubscribers = (d: Deps) =>
  routeHandler('plans.subscribers.list', async (req) => {
    const wallet = walletOf(req);
    if (!(await d.plans.get(d.db, wallet, req.params.id))) throw notFound('Plan');
    const page = await d.subscribers.list(d.db, wallet, { planId: req.params.id }, req.query.limit, req.query.offset);
    return { ...page, items: page.items.map(publicSubscriber) };
  });
