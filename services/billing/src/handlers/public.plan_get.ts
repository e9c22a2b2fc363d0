import { checkoutPageUrl, messages, notificationMessages } from '@sb/contracts';
import { callMessage, notFound, routeHandler, within } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { publicPlan } from '../domain/plans.js';

/** How long the public plan waits for the notifier's and payments' parts; the gateway waits 5 s for all of it. */
const COURTESY_DEADLINE_MS = 2_000;

export const getPublicPlan = (d: Deps) =>
  routeHandler('public.plan.get', async (req) => {
    const plan = await d.plans.getPublic(d.db, req.params.id);
    if (!plan) throw notFound('Plan');
    const pub = publicPlan(plan, (await d.methods()).availability, checkoutPageUrl(d.publicBaseUrl, plan.id));
    const fiatRail = pub.payment_methods.some((m) => m === 'cardproc' || m === 'walletproc');
    // The plan's notification channels live in the notifier, its fiat price in payments: both are courtesies
    // of the checkout page, which still works (asking for an e-mail address, in sats) when they cannot
    // answer, or answer late: a hung one must not make the gateway give up on the whole answer.
    const courtesy = <T>(p: Promise<T>, what: string) =>
      within(
        p.catch((err) => {
          d.log.warn({ err: String(err), plan_id: plan.id }, `${what} unavailable`);
          return undefined;
        }),
        COURTESY_DEADLINE_MS,
        () => {
          d.log.warn({ plan_id: plan.id }, `${what} not answered in ${COURTESY_DEADLINE_MS} ms`);
          return undefined;
        },
      );
    const [contact, fiat] = await Promise.all([
      courtesy(callMessage(d.bus, notificationMessages.contactMethods, { wallet_id: plan.wallet, plan_id: plan.id }), 'contact methods (offering e-mail)'),
      fiatRail ? courtesy(callMessage(d.bus, messages.fiatQuote, { amount_sats: plan.amount_sats }), 'fiat price of the public plan') : undefined,
    ]);
    return {
      ...pub,
      ...(contact ? { available_contact_methods: contact.methods } : {}),
      ...(contact?.messenger_bot && contact.methods.includes('messenger') ? { messenger_bot: contact.messenger_bot } : {}),
      ...(fiat ? { fiat_price: fiat } : {}),
    };
  });
