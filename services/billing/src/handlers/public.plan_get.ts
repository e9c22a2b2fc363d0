import { messages } from '@sb/contracts';
import { callMessage, notFound, routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { publicPlan } from '../domain/plans.js';
import { checkoutUrl } from '../subscribe.js';

export const getPublicPlan = (d: Deps) =>
  routeHandler('public.plan.get', async (req) => {
    const plan = await d.plans.getPublic(d.db, req.params.id);
    if (!plan) throw notFound('Plan');
    const pub = publicPlan(plan, d.availability, checkoutUrl(d.publicBaseUrl, plan.id));
    if (!pub.payment_methods.some((m) => m === 'cardproc' || m === 'walletproc')) return pub;
    // The fiat price is a courtesy of the checkout page: without a rate the plan is shown in sats only.
    const fiat = await callMessage(d.bus, messages.fiatQuote, { amount_sats: plan.amount_sats }).catch((err) => {
      d.log.warn({ err: String(err), plan_id: plan.id }, 'no fiat price for the public plan');
      return undefined;
    });
    return fiat ? { ...pub, fiat_price: fiat } : pub;
  });
