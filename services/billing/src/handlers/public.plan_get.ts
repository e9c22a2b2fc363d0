import { checkoutPageUrl, messages, notificationMessages } from '@sb/contracts';
import { callMessage, messageHandler, notFound, routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { publicPlan } from '../domain/plans.js';
import { courtesyRead } from './courtesy.js';

export const getPublicPlan = (d: Deps) =>
  routeHandler('public.plan.get', async (req) => {
    const plan = await d.plans.getPublic(d.db, req.params.id);
    if (!plan) throw notFound('Plan');
    const pub = publicPlan(plan, (await d.methods()).availability, checkoutPageUrl(d.publicBaseUrl, plan.id));
    const fiatRail = pub.payment_methods.some((m) => m === 'cardproc' || m === 'walletproc');
    // The plan's notification channels live in the notifier, its fiat price in payments: both are courtesies
    // of the checkout page, which still works (asking for an e-mail address, in sats) without them.
    const about = { plan_id: plan.id };
    const [contact, fiat] = await Promise.all([
      courtesyRead(
        d,
        () => callMessage(d.bus, notificationMessages.contactMethods, { wallet_id: plan.wallet, plan_id: plan.id }),
        'contact methods (offering e-mail)',
        about,
      ),
      fiatRail
        ? courtesyRead(d, () => callMessage(d.bus, messages.fiatQuote, { amount_sats: plan.amount_sats }), 'fiat price of the public plan', about)
        : undefined,
    ]);
    return {
      ...pub,
      ...(contact ? { available_contact_methods: contact.methods } : {}),
      ...(contact?.messenger_bot && contact.methods.includes('messenger') ? { messenger_bot: contact.messenger_bot } : {}),
      ...(contact?.merchant_name ? { merchant_name: contact.merchant_name } : {}),
      ...(fiat ? { fiat_price: fiat } : {}),
    };
  });

/** Whether `GET /public/plan/{id}` would find the plan: the gateway's question before a checkout page. */
export const planOffered = (d: Deps) =>
  messageHandler(messages.planOffered, async (req) =>
    (await d.plans.getPublic(d.db, req.id)) ? { offered: true } : { offered: false, archived: await d.plans.archived(d.db, req.id) },
  );
