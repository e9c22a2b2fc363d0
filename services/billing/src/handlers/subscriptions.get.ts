import { messages } from '@sb/contracts';
import { callMessage, messageHandler, notFound, routeHandler, unixSeconds, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { accessUntil } from '../domain/lifecycle.js';
import { toSubscription } from '../store/subscriptions.repo.js';

export const getSubscription = (d: Deps) =>
  routeHandler('subscriptions.get', async (req) => {
    const sub = await d.subscriptions.get(d.db, walletOf(req), req.params.id);
    if (!sub) throw notFound('Subscription');
    const payments = await callMessage(d.bus, messages.listSubscriptionPayments, { wallet_id: sub.wallet_id, subscription_id: sub.id, limit: 200, offset: 0 });
    return { ...toSubscription(sub, unixSeconds(d.clock)), payments: payments.items };
  });

export const listSubscriptionPayments = (d: Deps) =>
  routeHandler('subscriptions.payments.list', async (req) => {
    const sub = await d.subscriptions.get(d.db, walletOf(req), req.params.id);
    if (!sub) throw notFound('Subscription');
    return callMessage(d.bus, messages.listSubscriptionPayments, {
      wallet_id: sub.wallet_id,
      subscription_id: sub.id,
      limit: req.query.limit,
      offset: req.query.offset,
    });
  });

export const subscriptionStatus = (d: Deps) =>
  messageHandler(messages.subscriptionStatus, async ({ wallet_id, subscription_id }) => {
    const sub = await d.subscriptions.get(d.db, wallet_id, subscription_id);
    if (!sub) throw notFound('Subscription');
    return { status: sub.status, access_until: accessUntil(sub, unixSeconds(d.clock)) };
  });
