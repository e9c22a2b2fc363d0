import { managePageUrl } from '@sb/contracts';
import { notFound, routeHandler, walletOf } from '@sb/runtime';
import type { Deps } from '../deps.js';

export const manageLink = (d: Deps) =>
  routeHandler('subscriptions.manage_link', async (req) => {
    const sub = await d.subscriptions.get(d.db, walletOf(req), req.params.id);
    if (!sub) throw notFound('Subscription');
    const subscriber = await d.subscribers.get(d.db, sub.wallet_id, sub.subscriber_id);
    if (!subscriber) throw notFound('Subscription');
    return { subscription_id: sub.id, subscriber_email: subscriber.email, manage_url: managePageUrl(d.publicBaseUrl, d.secrets.open(subscriber.token_sealed)) };
  });
