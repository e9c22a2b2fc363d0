import { planRoutes } from './routes.plans.js';
import { archivedSubscriptionRoutes, subscriptionRoutes } from './routes.subscriptions.js';
import { planSubscriberRoutes, subscriberRoutes } from './routes.subscribers.js';
import { paymentRoutes } from './routes.payments.js';
import { watchonlyRoutes } from './routes.watchonly.js';
import { portalRoutes, publicRoutes, webhookRoutes } from './routes.public.js';
import { devRoutes } from './routes.dev.js';
import { notifierRoutes } from './routes.notifier.js';

/** Every HTTP route of the API, in the order of the interface spec. */
export const routes = [
  ...planRoutes,
  ...planSubscriberRoutes,
  ...subscriptionRoutes,
  ...subscriberRoutes,
  ...paymentRoutes,
  ...watchonlyRoutes,
  ...archivedSubscriptionRoutes,
  ...publicRoutes,
  ...portalRoutes,
  ...webhookRoutes,
  ...notifierRoutes,
  ...devRoutes,
] as const;
