import { answerOnce, callMessage, conflict, messageHandler, notFound, type Queryable, routeHandler, unixSeconds, invalid, unauthenticated } from '@sb/runtime';
import { messages, notificationMessages, turnBackOn, type BusRequest, type CreatedPayment, type UnsubscribeKind } from '@sb/contracts';
import type { Deps } from '../deps.js';
import { accessAfterCancel, accessUntil, channelsReaching, inTrial, noticeSwitches, RENEWABLE, reasonForSubscriber, TERMINAL } from '../domain/lifecycle.js';
import { toSubscription, type SubRow } from '../store/subscriptions.repo.js';
import { act, cancelled } from './subscription-action.js';
import { awaitingFirstPayment, noRenewalInvoice, renewableUntil, renewalEndedEarly, renewalOverdue, walletReconnected } from '../domain/schedule.js';
import { OPT_IN_OF, readUnsubscribeToken } from '../domain/unsubscribe.js';
import { saveSettings } from '../transitions.js';
import { courtesy, courtesyRead } from './courtesy.js';
import { checkoutPayment, methodRefused } from '../subscribe.js';

async function subscriberOf(d: Deps, q: Queryable, req: BusRequest) {
  const hash = req.caller.subscriber_token_hash;
  const s = hash ? await d.subscribers.byTokenHash(q, hash) : undefined;
  if (!s) throw unauthenticated('Invalid subscriber token');
  return s;
}

/** The renewal payment a live subscription's subscriber can pay now, as the payments service has it. */
async function openRenewal(d: Deps, s: SubRow) {
  if (!s.renewal_payment_id || !RENEWABLE.includes(s.status)) return null;
  const { payment } = await callMessage(d.bus, messages.getPayment, { wallet_id: s.wallet_id, id: s.renewal_payment_id });
  return payment && payment.subscription_id === s.id && payment.status === 'pending' ? payment : null;
}

/** What the portal names a plan by: its name and its seller (asked of the notifier as a courtesy). */
interface PlanNames {
  plan_name: string;
  merchant_name?: string | null;
  /** The channels its messages go by ([]: none, so the portal offers no switches for them). */
  notice_channels?: string[];
  /** The kinds of notice it sends (a switch for a kind it never sends promises nothing). */
  notice_kinds?: UnsubscribeKind[];
}

async function planNames(d: Deps, walletId: string, planId: string): Promise<PlanNames> {
  const [plan, contact] = await Promise.all([
    d.plans.get(d.db, walletId, planId),
    courtesyRead(d, () => callMessage(d.bus, notificationMessages.contactMethods, { wallet_id: walletId, plan_id: planId }), 'merchant name', {
      plan_id: planId,
    }),
  ]);
  return {
    plan_name: plan?.name ?? '',
    ...(contact ? { merchant_name: contact.merchant_name ?? null, notice_channels: contact.methods } : {}),
    ...(contact?.notice_kinds ? { notice_kinds: contact.notice_kinds } : {}),
  };
}

/** A plan's names as its subscriber sees them: only the channels that reach them. */
const forSubscriber = (names: PlanNames, contacts: Parameters<typeof channelsReaching>[1]): PlanNames =>
  names.notice_channels ? { ...names, notice_channels: channelsReaching(names.notice_channels, contacts) } : names;

/** A subscription as its subscriber sees it in the portal (no owner metadata, the reason in their words). */
async function portalItem(d: Deps, x: SubRow, names: PlanNames, now: number) {
  const { metadata: _m, ...rest } = toSubscription(x, now);
  const cancel_reason = reasonForSubscriber(x);
  const access_until = accessUntil(x, now);
  const access_after_cancel = accessAfterCancel(x, now);
  const pay_by = renewableUntil(x, d.policy);
  // A period is counted only once paid (a trial is period 0): the payments list may not reach that far back.
  const ever_paid = x.period_index > 0;
  const wallet_disconnected = x.payment_method === 'nwc' && x.nwc_fallback;
  // By the service's clock, not the subscriber's device (a wrong device clock, or the test clock, told
  // a trial that was over as running, and a period extended past today as ended).
  const in_trial = inTrial(x, now);
  const renewal_overdue = renewalOverdue(x, now);
  // Said on the card, so that a subscriber sent here to pay is not left with nothing to pay and no word.
  const renewal_refused = RENEWABLE.includes(x.status) && noRenewalInvoice(x, now);
  // A hung payments service must not keep the subscriber from their subscriptions (cancel, notices):
  // without its answer in time the open payment is left out (absent, not null: unknown, not none).
  const open_payment = await courtesy(d, openRenewal(d, x), 'open renewal payment', { subscription_id: x.id });
  return {
    ...rest,
    cancel_reason,
    access_until,
    access_after_cancel,
    pay_by,
    ...names,
    open_payment,
    ever_paid,
    wallet_disconnected,
    in_trial,
    renewal_overdue,
    renewal_refused,
  };
}

export const portalListSubscriptions = (d: Deps) =>
  routeHandler('portal.subscriptions.list', async (req) => {
    const s = await subscriberOf(d, d.db, req);
    const page = await d.subscriptions.list(d.db, { wallet_id: s.wallet_id, subscriber_id: s.id }, req.query.limit, req.query.offset);
    const names = new Map<string, Promise<PlanNames>>();
    for (const sub of page.items) if (!names.has(sub.plan_id)) names.set(sub.plan_id, planNames(d, s.wallet_id, sub.plan_id));
    const now = unixSeconds(d.clock);
    return { ...page, items: await Promise.all(page.items.map(async (x) => portalItem(d, x, forSubscriber(await names.get(x.plan_id)!, s), now))) };
  });

/**
 * The subscriber's own notice opt-ins of one subscription (see saveSettings). Another subscriber's is 404
 * like an unknown one (nothing tells a stranger's id from a wrong one).
 */
export const portalUpdate = (d: Deps) =>
  routeHandler('portal.subscriptions.update', async (req) => {
    const { saved, s } = await d.db.tx(async (tx) => {
      const s = await subscriberOf(d, tx, req);
      const sub = await d.subscriptions.get(tx, s.wallet_id, req.params.id, true);
      if (!sub || sub.subscriber_id !== s.id) throw notFound('Subscription');
      return { saved: await saveSettings(d, tx, sub, noticeSwitches(sub, req.body), unixSeconds(d.clock)), s };
    });
    return portalItem(d, saved, forSubscriber(await planNames(d, saved.wallet_id, saved.plan_id), s), unixSeconds(d.clock));
  });

/** The subscription and kind of notice a one-click unsubscribe token names; 404 for anything else. */
async function linked(d: Deps, q: Queryable, token: string, lock: boolean) {
  const t = readUnsubscribeToken(d.secrets, token);
  const sub = t && (await d.subscriptions.get(q, null, t.subscriptionId, lock));
  if (!t || !sub) throw notFound('Subscription');
  return { sub, kind: t.kind, field: OPT_IN_OF[t.kind] };
}

/**
 * What a one-click unsubscribe URL turns off, for the page a browser opening it gets: mail scanners
 * fetch these links, so nothing changes here. The merchant's name lives in the notifier: without its
 * answer the page names the plan alone.
 */
export const publicUnsubscribeLink = (d: Deps) =>
  routeHandler('public.unsubscribe.get', async (req) => {
    const { sub, kind, field } = await linked(d, d.db, req.params.token, false);
    const { plan_name, merchant_name } = await planNames(d, sub.wallet_id, sub.plan_id);
    return { kind, plan_name, merchant_name: merchant_name ?? null, receiving: sub[field], ended: TERMINAL.includes(sub.status) };
  });

/**
 * RFC 8058 one-click unsubscribe from an e-mail's List-Unsubscribe URL: the token's kind of notice off
 * for its subscription. Idempotent (already off: 200 again, nothing written); whatever the token does not
 * verify for is 404, as an unknown subscription.
 */
export const publicUnsubscribe = (d: Deps) =>
  routeHandler('public.unsubscribe', async (req) => {
    const { sub, kind } = await d.db.tx(async (tx) => {
      const l = await linked(d, tx, req.params.token, true);
      // Taken also for one that ended: a payment made before may still bring it a confirmation (a late
      // payment, a renewal paid before a cancel), and a one-click POST is a mail client's, not undone.
      if (l.sub[l.field]) await saveSettings(d, tx, l.sub, { [l.field]: false }, unixSeconds(d.clock));
      return l;
    });
    const plan = await d.plans.get(d.db, sub.wallet_id, sub.plan_id);
    const what = kind === 'reminders' ? 'reminders' : 'confirmations and receipts';
    // Ended, the portal has no switches for it: no "turn them back on there" (found from outside).
    if (TERMINAL.includes(sub.status))
      return {
        success: true,
        message: `You will no longer get ${what} for ${plan?.name || 'this subscription'}, which ${sub.status === 'expired' ? 'has expired' : 'was cancelled'}.`,
      };
    return {
      success: true,
      message: `You will no longer get ${what} for ${plan?.name || 'this subscription'}. ${turnBackOn(what)}`,
    };
  });

/** Receipts and open payments of every subscription of the token's subscriber (payments live in the payments service). */
export const portalListPayments = (d: Deps) =>
  routeHandler('portal.payments.list', async (req) => {
    const s = await subscriberOf(d, d.db, req);
    const subs = await d.subscriptions.list(d.db, { wallet_id: s.wallet_id, subscriber_id: s.id }, 1000, 0);
    return callMessage(d.bus, messages.listPortalPayments, {
      wallet_id: s.wallet_id,
      subscription_ids: subs.items.map((x) => x.id),
      limit: req.query.limit,
      offset: req.query.offset,
    });
  });

/**
 * The payable first invoice of a subscription waiting for its first payment (its open one, or a fresh one
 * when that ran out), or why there is none; each caller answers that its own way. Not a resume's payment
 * (it has periods behind it).
 */
type FirstInvoice = { created: CreatedPayment } | { paid: true } | { none: string; ended?: true; refused?: true };

async function firstInvoice(d: Deps, sub: SubRow): Promise<FirstInvoice> {
  const notWaiting = (status: string) => ({ none: `This subscription is not waiting for its first payment (it is ${status})`, ended: true as const });
  if (!awaitingFirstPayment(sub)) return notWaiting(sub.status);
  // The plan as it is now, as a checkout would take it: archived (its subscriptions are cancelled with
  // it), or no longer taking this method.
  const plan = await d.plans.getPublic(d.db, sub.plan_id);
  if (!plan) return { none: 'This plan is no longer offered' };
  const refused = await methodRefused(d, plan, sub.payment_method);
  if (refused) return { none: `${refused.message}: subscribe again on the plan's checkout page with another method`, refused: true };
  const created = await checkoutPayment(d, plan, sub);
  const { payment } = created;
  // Paid, not applied yet: nothing more to pay (found in review: shown again as payable).
  if (payment.status !== 'pending') return { paid: true };
  // Cancelled (or activated) while the invoice was being made: the move withdrew the open payments it
  // saw, maybe not this one (found from outside: payable on a cancelled subscription).
  const now = await d.subscriptions.get(d.db, sub.wallet_id, sub.id);
  if (!now || !awaitingFirstPayment(now)) {
    await callMessage(d.bus, messages.expireOpenPayments, { wallet_id: sub.wallet_id, subscription_id: sub.id, payment_id: payment.id });
    return notWaiting(now?.status ?? 'gone');
  }
  return { created };
}

/**
 * What pays a subscription still waiting for its first payment, for its subscriber in the portal (found
 * from outside: the portal said "Waiting for the first payment" with nothing to pay it with).
 */
export const portalCheckoutInvoice = (d: Deps) =>
  routeHandler('portal.subscriptions.invoice', async (req) => {
    const s = await subscriberOf(d, d.db, req);
    const sub = await d.subscriptions.get(d.db, s.wallet_id, req.params.id);
    if (!sub || sub.subscriber_id !== s.id) throw notFound('Subscription');
    const first = await firstInvoice(d, sub);
    if ('paid' in first) throw conflict('Its first payment was made: the subscription becomes active in a moment');
    if ('none' in first) throw conflict(first.none);
    const page = await callMessage(d.bus, messages.listPortalPayments, { wallet_id: s.wallet_id, subscription_ids: [sub.id], limit: 200, offset: 0 });
    const shown = page.items.find((p) => p.id === first.created.payment.id);
    if (!shown) throw conflict('The payment changed meanwhile, please retry');
    return shown;
  });

/**
 * The invoice a wallet just connected in the portal pays, for a subscription waiting for its first payment
 * (found from outside: connected to a pending subscription, it paid nothing and the subscriber had to pay
 * by hand). Asked by the NWC service once the connection is stored; an invoice that cannot be made now
 * (payments away) is an error it answers as "not asked".
 */
export const firstPaymentDue = (d: Deps) =>
  messageHandler(messages.firstPaymentDue, async ({ wallet_id, subscriber_id, subscription_id }) => {
    const sub = await d.subscriptions.get(d.db, wallet_id, subscription_id);
    if (!sub || sub.subscriber_id !== subscriber_id) throw notFound('Subscription');
    const first = await firstInvoice(d, sub);
    if ('paid' in first) return { state: 'paid' as const };
    if ('none' in first && first.ended) return { state: 'not_due' as const };
    // In the subscriber's words: the refusal's own names an owner's setting (found in review).
    if ('none' in first)
      return {
        state: 'unpayable' as const,
        reason: first.refused ? "This plan can no longer be paid by a wallet: subscribe again on the plan's checkout page with another method" : first.none,
      };
    const { payment, checkout } = first.created;
    const payment_request = checkout.payment_request ?? payment.payment_request;
    if (!payment_request) return { state: 'unpayable' as const, reason: 'Its invoice cannot be paid by a wallet' };
    return { state: 'due' as const, payment: { id: payment.id, payment_request, amount_sats: payment.amount_sats } };
  });

export const portalCancel = (d: Deps) =>
  answerOnce(d.answered, d.db, 'portal.subscriptions.cancel', async (req, keep) => {
    const { reply } = await act(
      d,
      async (tx) => {
        const s = await subscriberOf(d, tx, req);
        const sub = await d.subscriptions.get(tx, s.wallet_id, req.params.id, true);
        return sub && sub.subscriber_id === s.id ? sub : undefined;
      },
      () => ({ type: 'cancel', immediate: false, by: 'subscriber', reason: 'cancelled by subscriber' }),
      cancelled,
      keep,
    );
    return reply;
  });

/** A subscription whose NWC wallet is gone renews by invoice (idempotent). */
export const nwcFallback = (d: Deps) =>
  messageHandler(messages.nwcFallback, async ({ wallet_id, subscription_id }) => {
    return { changed: await d.subscriptions.setNwcFallback(d.db, wallet_id, subscription_id, unixSeconds(d.clock)) };
  });

/** A renewal payment the provider ended early is replaced on the next scheduler pass (idempotent). */
export const renewalEnded = (d: Deps) =>
  messageHandler(messages.renewalEnded, async ({ wallet_id, subscription_id, payment_id }) => {
    return d.db.tx(async (tx) => {
      const sub = await d.subscriptions.get(tx, wallet_id, subscription_id, true);
      const now = unixSeconds(d.clock);
      const change = sub && renewalEndedEarly(sub, payment_id, now);
      if (!sub || !change) return { replaced: false };
      // Locked above, so the version cannot have moved meanwhile.
      if (!(await d.subscriptions.save(tx, { ...sub, ...change, updated_at: now }))) throw conflict('The subscription changed meanwhile, please retry');
      return { replaced: true };
    });
  });

/** The NWC service's portal routes resolve the X-Subscriber-Token's subscriber here (subscribers live in billing). */
export const subscriberOfToken = (d: Deps) =>
  messageHandler(messages.subscriberOfToken, async ({ token_hash }) => {
    const s = await d.subscribers.byTokenHash(d.db, token_hash);
    if (!s) throw notFound('Subscriber');
    return { subscriber_id: s.id, wallet_id: s.wallet_id };
  });

/** A wallet connected in the portal: the subscription (the subscriber's, live, made with NWC) renews from a wallet again. */
const reconnect = (d: Deps, check_only: boolean) =>
  messageHandler(check_only ? messages.nwcReconnectCheck : messages.nwcReconnect, async ({ wallet_id, subscriber_id, subscription_id, max_amount_sats }) => {
    return d.db.tx(async (tx) => {
      const sub = await d.subscriptions.get(tx, wallet_id, subscription_id, true);
      if (!sub || sub.subscriber_id !== subscriber_id) throw notFound('Subscription');
      if (sub.status === 'cancelled' || sub.status === 'expired') throw conflict('This subscription has ended');
      if (sub.payment_method !== 'nwc')
        throw conflict('Only a subscription made with a wallet (NWC) can be paid by a wallet; subscribe with NWC on the checkout page');
      if (max_amount_sats !== undefined && max_amount_sats < sub.amount_sats) {
        throw invalid(['max_amount_sats'], `The limit (${max_amount_sats} sats) is below the subscription's price of ${sub.amount_sats} sats`);
      }
      const now = unixSeconds(d.clock);
      if (!check_only && sub.nwc_fallback && !(await d.subscriptions.save(tx, { ...sub, ...walletReconnected(sub, now), updated_at: now })))
        throw conflict('The subscription changed meanwhile, please retry');
      const [plan, subscriber] = await Promise.all([d.plans.get(tx, wallet_id, sub.plan_id), d.subscribers.get(tx, wallet_id, subscriber_id)]);
      return {
        plan_id: sub.plan_id,
        plan_name: plan?.name ?? '',
        amount_sats: sub.amount_sats,
        subscriber_email: subscriber?.email ?? null,
        subscriber_name: subscriber?.name ?? null,
        first_payment_due: awaitingFirstPayment(sub),
      };
    });
  });
export const nwcReconnect = (d: Deps) => reconnect(d, false);
/** The same checks, nothing changed: the NWC service asks before it contacts the wallet. */
export const nwcReconnectCheck = (d: Deps) => reconnect(d, true);
