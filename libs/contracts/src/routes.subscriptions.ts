import { IdParams, Paginated, PaginationQuery, SuccessMessageResponse } from './common.js';
import { defineRoutes } from './http.js';
import { Payment } from './payments.js';
import {
  CancelRequest,
  ExtendQuery,
  ManageLinkResponse,
  Subscription,
  SubscriptionListQuery,
  SubscriptionUpdate,
  SubscriptionWithPayments,
} from './subscriptions.js';

export const subscriptionRoutes = defineRoutes([
  {
    id: 'subscriptions.list', method: 'get', path: '/subscriptions', auth: 'invoice',
    summary: "List the wallet's subscriptions, optionally by status", query: SubscriptionListQuery,
    response: Paginated(Subscription), subject: 'billing.subscriptions.list',
  },
  {
    id: 'subscriptions.get', method: 'get', path: '/subscriptions/{id}', auth: 'invoice',
    summary: 'Read a subscription with its payment history', params: IdParams,
    response: SubscriptionWithPayments, subject: 'billing.subscriptions.get',
  },
  {
    id: 'subscriptions.update', method: 'put', path: '/subscriptions/{id}', auth: 'admin',
    summary: "Change a subscription's metadata or notification settings", params: IdParams,
    body: SubscriptionUpdate, response: Subscription, subject: 'billing.subscriptions.update',
  },
  {
    id: 'subscriptions.pause', method: 'post', path: '/subscriptions/{id}/pause', auth: 'admin',
    summary: 'Pause: no renewal while paused; access until the end of the current period',
    params: IdParams, response: Subscription, subject: 'billing.subscriptions.pause',
  },
  {
    id: 'subscriptions.resume', method: 'post', path: '/subscriptions/{id}/resume', auth: 'admin',
    summary: 'Resume a paused subscription', params: IdParams, response: Subscription,
    subject: 'billing.subscriptions.resume',
    // Resumed after the period ended, an NWC subscription's wallet is asked to pay at once (up to 40 s).
    busTimeoutMs: 45_000,
  },
  {
    id: 'subscriptions.cancel', method: 'post', path: '/subscriptions/{id}/cancel', auth: 'admin',
    summary: 'Cancel, at period end or immediately; the subscriber is notified', params: IdParams,
    body: CancelRequest, bodyOptional: true, response: SuccessMessageResponse,
    subject: 'billing.subscriptions.cancel',
  },
  {
    id: 'subscriptions.extend', method: 'post', path: '/subscriptions/{id}/extend', auth: 'admin',
    summary: 'Add free days to the current period', params: IdParams, query: ExtendQuery,
    response: Subscription, subject: 'billing.subscriptions.extend',
  },
  {
    id: 'subscriptions.manage_link', method: 'get', path: '/subscriptions/{id}/manage-link', auth: 'admin',
    summary: "The subscriber's self-service portal link", params: IdParams,
    response: ManageLinkResponse, subject: 'billing.subscriptions.manage_link',
  },
  {
    id: 'subscriptions.payments.list', method: 'get', path: '/subscriptions/{id}/payments', auth: 'invoice',
    summary: "List a subscription's payments", params: IdParams, query: PaginationQuery,
    response: Paginated(Payment), subject: 'billing.subscriptions.payments',
  },
] as const);

export const archivedSubscriptionRoutes = defineRoutes([
  {
    id: 'subscriptions.archived.list', method: 'get', path: '/archive/subscriptions', auth: 'invoice',
    summary: 'List archived subscriptions (cancelled or expired)', query: PaginationQuery,
    response: Paginated(Subscription), subject: 'billing.subscriptions.list_archived',
  },
] as const);
