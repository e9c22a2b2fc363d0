import { notificationMessages } from '@sb/contracts';
import { callMessage, notFound, routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { publicPlan } from '../domain/plans.js';

export const getPublicPlan = (d: Deps) =>
  routeHandler('public.plan.get', async (req) => {
    const plan = await d.plans.getPublic(d.db, req.params.id);
    if (!plan) throw notFound('Plan');
    // The plan's notification channels live in the notifier; a checkout page still works (asking for an
    // e-mail address) when the notifier cannot answer.
    const contact = await callMessage(d.bus, notificationMessages.contactMethods, { wallet_id: plan.wallet, plan_id: plan.id }).catch((err) => {
      d.log.warn({ err: (err as Error).message, plan_id: plan.id }, 'contact methods unavailable; offering e-mail');
      return { methods: ['email' as const] };
    });
    return publicPlan(plan, d.availability, contact.methods);
  });
