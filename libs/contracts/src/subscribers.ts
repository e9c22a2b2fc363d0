import { z } from './zod.js';
import { Id, PaginationQuery, UnixSeconds } from './common.js';
import { Subscription } from './subscriptions.js';

const subscriberFields = {
  id: Id,
  email: z.string().nullable().optional(),
  messenger: z.string().nullable().optional().openapi({ description: 'Chat username' }),
  nostr: z.string().nullable().optional().openapi({ description: 'Nostr npub or NIP-05' }),
  name: z.string().nullable().optional(),
  created_at: UnixSeconds,
};

/** The stored subscriber, with its portal token: internal and for the services, never listed. */
export const Subscriber = z
  .object({
    ...subscriberFields,
    access_token: z.string().openapi({ description: 'Subscriber portal token' }),
  })
  .openapi('Subscriber');
export type Subscriber = z.infer<typeof Subscriber>;

/** What the owner's lists and detail show: the subscriber without the access token. */
export const SubscriberPublic = z.object(subscriberFields).openapi('SubscriberPublic');
export type SubscriberPublic = z.infer<typeof SubscriberPublic>;

/** `GET /subscribers/{id}`: the subscriber and all their subscriptions. */
export const SubscriberDetail = SubscriberPublic.extend({ subscriptions: z.array(Subscription) }).openapi('SubscriberDetail');
export type SubscriberDetail = z.infer<typeof SubscriberDetail>;

export const SubscriberListQuery = PaginationQuery.extend({
  search: z.string().max(200).optional().openapi({ description: 'Case-insensitive match on email, name, messenger or nostr' }),
});
export type SubscriberListQuery = z.infer<typeof SubscriberListQuery>;
