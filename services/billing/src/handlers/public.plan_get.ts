import { notFound, routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { publicPlan } from '../domain/plans.js';
import { checkoutUrl } from '../subscribe.js';

export const getPublicPlan = (d: Deps) =>
  routeHandler('public.plan.get', async (req) => {
    const plan = await d.plans.getPublic(d.db, req.params.id);
    if (!plan) throw notFound('Plan');
    return publicPlan(plan, d.availability, checkoutUrl(d.publicBaseUrl, plan.id));
  });
