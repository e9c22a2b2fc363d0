import { IdParams, Paginated, PaginationQuery } from './common.js';
import { defineRoutes } from './http.js';
import { SubscriberDetail, SubscriberListQuery, SubscriberPublic } from './subscribers.js';

/** `GET /plans/{id}/subscribers` sits with the plan routes in the spec; billing answers it. */
export const planSubscriberRoutes = defineRoutes([
  {
    id: 'plans.subscribers.list',
    method: 'get',
    path: '/plans/{id}/subscribers',
    auth: 'invoice',
    summary: 'List the subscribers of a plan',
    params: IdParams,
    query: PaginationQuery,
    response: Paginated(SubscriberPublic),
    subject: 'billing.plans.list_subscribers',
  },
] as const);

export const subscriberRoutes = defineRoutes([
  {
    id: 'subscribers.list',
    method: 'get',
    path: '/subscribers',
    auth: 'invoice',
    summary: "List subscribers across the wallet's plans; `search` matches email, name or contact",
    query: SubscriberListQuery,
    response: Paginated(SubscriberPublic),
    subject: 'billing.subscribers.list',
  },
  {
    id: 'subscribers.get',
    method: 'get',
    path: '/subscribers/{id}',
    auth: 'invoice',
    summary: 'Read a subscriber with all their subscriptions',
    params: IdParams,
    response: SubscriberDetail,
    subject: 'billing.subscribers.get',
  },
] as const);
