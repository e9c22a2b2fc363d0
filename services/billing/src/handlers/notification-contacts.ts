import { checkoutPageUrl, managePageUrl, notificationMessages, unsubscribeUrl } from '@sb/contracts';
import { messageHandler, notFound } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { unsubscribeToken } from '../domain/unsubscribe.js';

/**
 * Whom a subscription's notices reach, asked by the notifier when it handles an event: the contacts as
 * they are now (not as the event saw them), and the portal link, which never travels in events (it
 * carries the subscriber's token).
 */
export const subscriptionContact = (d: Deps) =>
  messageHandler(notificationMessages.subscriptionContact, async ({ wallet_id, subscription_id }) => {
    const sub = await d.subscriptions.get(d.db, wallet_id, subscription_id);
    const s = sub && (await d.subscribers.get(d.db, wallet_id, sub.subscriber_id));
    if (!s) throw notFound('Subscription');
    // Where an ended subscription's notice sends the subscriber to subscribe again, while the plan is offered.
    const plan = await d.plans.getPublic(d.db, sub.plan_id);
    return {
      email: s.email,
      messenger: s.messenger,
      nostr: s.nostr,
      name: s.name,
      contact_preference: s.contact_preference,
      manage_url: managePageUrl(d.publicBaseUrl, d.secrets.open(s.token_sealed)),
      // For e-mail headers, which mail providers store and fetch: purpose-limited, never the portal token.
      unsubscribe_urls: {
        reminders: unsubscribeUrl(d.publicBaseUrl, unsubscribeToken(d.secrets, sub.id, 'reminders')),
        confirmations: unsubscribeUrl(d.publicBaseUrl, unsubscribeToken(d.secrets, sub.id, 'confirmations')),
      },
      plan_checkout_url: plan ? checkoutPageUrl(d.publicBaseUrl, plan.id) : null,
    };
  });
