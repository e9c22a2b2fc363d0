import type { Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import type { Scheduler } from '../scheduler.js';
import { devClock } from './dev.clock.js';
import { archivePlanHandler } from './plans.archive.js';
import { createPlan } from './plans.create.js';
import { getPlan, planExists } from './plans.get.js';
import { listPlans } from './plans.list.js';
import { listArchivedPlans } from './plans.list_archived.js';
import { updatePlanHandler } from './plans.update.js';
import {
  nwcFallback,
  nwcReconnect,
  nwcReconnectCheck,
  firstPaymentDue,
  portalCancel,
  portalCheckoutInvoice,
  portalListPayments,
  portalListSubscriptions,
  portalUpdate,
  publicUnsubscribe,
  publicUnsubscribeLink,
  renewalEnded,
  subscriberOfToken,
} from './portal.js';
import { subscriptionContact } from './notification-contacts.js';
import { getPublicPlan, planOffered } from './public.plan_get.js';
import { subscribe, subscribeNwc, subscribeNwcCheck } from './public.subscribe.js';
import { getSubscriber, listPlanSubscribers, listSubscribers } from './subscribers.js';
import { cancelSubscription } from './subscriptions.cancel.js';
import { extendSubscription } from './subscriptions.extend.js';
import { getSubscription, listSubscriptionPayments, subscriptionStatus } from './subscriptions.get.js';
import { listArchivedSubscriptions, listSubscriptions } from './subscriptions.list.js';
import { manageLink } from './subscriptions.manage_link.js';
import { pauseSubscription } from './subscriptions.pause.js';
import { resumeSubscription } from './subscriptions.resume.js';
import { updateSubscription } from './subscriptions.update.js';

export const allHandlers = (d: Deps, scheduler: Scheduler): Handler[] => [
  listPlans(d),
  createPlan(d),
  getPlan(d),
  planExists(d),
  planOffered(d),
  updatePlanHandler(d),
  archivePlanHandler(d),
  listArchivedPlans(d),
  getPublicPlan(d),
  listPlanSubscribers(d),
  listSubscriptions(d),
  getSubscription(d),
  updateSubscription(d),
  pauseSubscription(d),
  resumeSubscription(d, scheduler),
  cancelSubscription(d),
  extendSubscription(d),
  manageLink(d),
  listSubscriptionPayments(d),
  listArchivedSubscriptions(d),
  listSubscribers(d),
  getSubscriber(d),
  subscribe(d),
  subscribeNwc(d),
  subscribeNwcCheck(d),
  portalListSubscriptions(d),
  portalListPayments(d),
  portalCancel(d),
  portalCheckoutInvoice(d),
  portalUpdate(d),
  publicUnsubscribe(d),
  publicUnsubscribeLink(d),
  subscriberOfToken(d),
  nwcFallback(d),
  subscriptionStatus(d),
  renewalEnded(d),
  nwcReconnect(d),
  nwcReconnectCheck(d),
  firstPaymentDue(d),
  subscriptionContact(d),
  ...(d.devClock ? [devClock(d, scheduler)] : []),
];
