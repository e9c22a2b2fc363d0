import { createHash, randomBytes } from 'node:crypto';
import {
  ALREADY_SUBSCRIBED,
  EXPIRED_BECAUSE,
  ID_PREFIXES,
  managePageUrl,
  messages,
  METHOD_FLAGS,
  notificationMessages,
  type CreatedPayment,
  type PaymentMethod,
  type Plan,
} from '@sb/contracts';
import { BusUnavailableError, callMessage, DomainError, newId, notFound, unixSeconds, invalid, invalidFields } from '@sb/runtime';
import type { Deps } from './deps.js';
import { contactIssues, preferenceIssues } from './domain/contacts.js';
import { startSubscription } from './domain/lifecycle.js';
import { courtesyRead } from './handlers/courtesy.js';
import { requestPayment } from './payments-client.js';
import type { SubRow } from './store/subscriptions.repo.js';
import { applyTransition, emit } from './transitions.js';

/** How long a first payment can be paid: Lightning and NWC invoices 1 h; on-chain, card and wallet processor 24 h. */
const CHECKOUT_SECONDS: Partial<Record<PaymentMethod, number>> = { lightning: 3600, nwc: 3600 };

/** As long as the gateway keeps an Idempotency-Key. */
const IDEMPOTENCY_KEY_LIFE_S = 86_400;

/**
 * How often a checkout refused because of the contact's unpaid one tries again when concurrent checkouts of
 * the contact on other methods keep moving that one (each try replaces it or opens anew): enough for the
 * methods a checkout page offers clicked at once, and bounded, so that two callers cannot chase each other.
 */
const CHECKOUT_TRIES = 3;

/** What every subscribe entry point (checkout, NWC) asks for; every attempt of one request gets all of it. */
interface SubscribeInput {
  plan_id: string;
  payment_method: PaymentMethod;
  email?: string | undefined;
  name?: string | undefined;
  messenger?: string | undefined;
  nostr?: string | undefined;
  contact_preference?: 'email' | 'messenger' | 'nostr' | undefined;
  receive_confirmations: boolean;
  receive_reminders: boolean;
  /** The caller's Idempotency-Key, hashed and scoped by the gateway: a retry answers the same checkout. */
  checkout_key?: string | undefined;
  /** NWC: the wallet's limit of one payment; a plan priced above it is refused before anything is written. */
  max_amount_sats?: number | undefined;
}

export interface Opened {
  plan: Plan;
  sub: SubRow;
  /** Only when this request created the subscriber (never an existing subscriber's token). */
  manage_url: string | null;
  /** The first payment; absent for a plan with a free trial (the subscription is active at once). */
  created?: CreatedPayment;
}

/**
 * That 409, recognisable as such: only it sends a request to the contact's unpaid checkout. Any other
 * conflict (an illegal move, a concurrent change) is answered as it is.
 */
class AlreadySubscribed extends DomainError {
  constructor() {
    super('conflict', ALREADY_SUBSCRIBED);
  }
}

/**
 * The subscribe of every entry point: `openSubscription`, and when the contact already has a live
 * subscription of the plan, their unpaid checkout (`pendingCheckout`) instead of the 409. Each attempt
 * gets the whole input (its Idempotency-Key, its limits). Also `openSubscription` once more after a
 * concurrent checkout of the contact moved the one in the way: of two switches at once, the one that lost
 * answers the checkout the other opened when it is its method, and replaces it otherwise, as it would
 * have had it come second. `tries` bounds how often it may replace or open a checkout.
 */
export function openCheckout(d: Deps, input: SubscribeInput, tries = CHECKOUT_TRIES): Promise<Opened> {
  return openSubscription(d, input).catch(async (err) => {
    const pending = err instanceof AlreadySubscribed ? await pendingCheckout(d, input, tries) : undefined;
    if (!pending) throw err;
    return pending;
  });
}

/**
 * A contact whose checkout was not paid may try again: their pending subscription of the plan on the same
 * method is reused with a payable first payment (the open one, or a new one when it expired: the checkout
 * page's "fresh invoice"), instead of a 409 until it expires. For NWC the wallet refused or did not
 * answer, and the retry may come with the same or another wallet; after an outage the checkout may have
 * no payment at all (payments or the database failed after the subscription was saved). A retry while the
 * first request still runs gets the same payment (payments is idempotent on `checkout:<subscription>`).
 * Undefined when there is no such subscription. No portal link is answered: the caller only proved to
 * know the e-mail address. Called after that 409; `tries` bounds how often it may replace or open a checkout.
 */
async function pendingCheckout(d: Deps, input: SubscribeInput, tries: number): Promise<Opened | undefined> {
  const plan = await d.plans.getPublic(d.db, input.plan_id);
  if (!plan || !input.email) return undefined;
  const subscriber = await d.subscribers.byEmail(d.db, plan.wallet, input.email);
  if (!subscriber) return undefined;
  const sub = await d.subscriptions.liveOf(d.db, subscriber.id, plan.id);
  // Nothing live after a 409: a concurrent checkout on another method expired the one that refused this
  // request and has not committed its own yet. Sent after it, this request would have replaced it.
  if (!sub) return tries > 0 ? openCheckout(d, input, tries - 1) : undefined;
  if (sub.status !== 'pending') return undefined;
  if (sub.payment_method !== input.payment_method) {
    if (tries <= 0) return undefined;
    const switched = await switchedCheckout(d, input, sub, tries - 1);
    if (!switched) throw new AlreadySubscribed();
    return switched;
  }
  const created = await checkoutPayment(d, plan, sub);
  await withdrawnIfReplaced(d, sub);
  return { plan, sub, manage_url: null, created };
}

/**
 * How many invoices one ask may step through from the newest it knows of: one or two in practice (the
 * newest is stored after each ask); a bound, not a limit a subscriber can reach.
 */
const CHECKOUT_STEPS_MAX = 50;

/**
 * What a subscription waiting for its first payment is paid with now: the newest of its invoices while it
 * can be paid (or was paid: billing has not heard yet), else a fresh one. Each fresh invoice is keyed by
 * the one it follows (`checkout:<sub>:after:<payment>`), so that any number of asks at once (the checkout
 * page's "fresh invoice" in two tabs, the portal's) find or make the same one: never two open at once.
 * The walk starts at the newest invoice an earlier ask stored, so a checkout may run through any number of
 * invoices (short ones under a low INVOICE_MAX_EXPIRY_S) within its 24 hours.
 */
export async function checkoutPayment(d: Deps, plan: Plan, sub: SubRow): Promise<CreatedPayment> {
  const now = unixSeconds(d.clock);
  const o = {
    purpose: 'checkout' as const,
    description: `${plan.name} (${plan.interval})`,
    expires_at: now + (CHECKOUT_SECONDS[sub.payment_method] ?? 86_400),
  };
  const first = `checkout:${sub.id}`;
  const known = (await d.subscriptions.checkoutInvoiceKey(d.db, sub.id)) ?? first;
  let key = known;
  let before: { key: string; id: string } | undefined;
  for (let i = 0; i < CHECKOUT_STEPS_MAX; i++) {
    let created: CreatedPayment;
    try {
      created = await requestPayment(d, plan, sub, { ...o, idempotency_key: key, ...(before ? { replaces: before.id } : {}) });
    } catch (err) {
      // The one it would follow was paid meanwhile (a late payment): asked again, that one is the answer.
      if (!(err instanceof DomainError && err.kind === 'conflict' && before)) throw err;
      key = before.key;
      before = undefined;
      continue;
    }
    const p = created.payment;
    if (p.status === 'paid' || (p.status === 'pending' && created.checkout.expires_at > now)) {
      if (key !== known) await d.subscriptions.setCheckoutInvoiceKey(d.db, sub.id, key);
      return created;
    }
    before = { key, id: p.id };
    key = `checkout:${sub.id}:after:${p.id}`;
  }
  // Reached only when that many invoices ran out since the last ask (the newest was not stored, say): the
  // next ask goes on from here.
  if (before) await d.subscriptions.setCheckoutInvoiceKey(d.db, sub.id, before.key);
  throw new DomainError('unavailable', 'A fresh invoice could not be made just now: please try again');
}

/**
 * The contact's unpaid checkout of the plan on another method (they went back and chose again, say after
 * a reload): it expires and a checkout on the method chosen now takes its place, instead of a 409 for 24
 * hours. Its payment made after all still counts: a late payment activates the contact's newer pending
 * checkout. Not from on-chain (a transaction may be on its way: it confirms late, and the subscriber
 * would pay twice), not to or from NWC (a checkout there holds a wallet connection), nor for a
 * subscription pending since a resume (it has periods behind it).
 */
async function switchedCheckout(d: Deps, input: SubscribeInput, sub: SubRow, tries: number): Promise<Opened | undefined> {
  const fixed = sub.payment_method === 'nwc' || input.payment_method === 'nwc';
  if (fixed || sub.period_index !== 0 || sub.trial_end !== null) return undefined;
  const ref = { wallet_id: sub.wallet_id, subscription_id: sub.id };
  // An on-chain checkout that never got its payment (payments away when it was made: a 503 keeps it
  // pending) has no address a transaction could be on its way to: it is replaced like the others.
  if (sub.payment_method === 'onchain' && (await callMessage(d.bus, messages.listSubscriptionPayments, { ...ref, limit: 1, offset: 0 })).items.length)
    return undefined;
  // Its payment is withdrawn first, and the checkout replaced only if nothing of it was paid: billing
  // hears of a payment some time after payments recorded it, and a paid checkout must not be replaced
  // (the subscriber would be asked to pay twice).
  await callMessage(d.bus, messages.expireOpenPayments, ref);
  const paid = (await callMessage(d.bus, messages.listSubscriptionPayments, { ...ref, limit: 200, offset: 0 })).items.some((p) => p.status === 'paid');
  if (paid) throw new AlreadySubscribed();
  await d.db.tx(async (tx) => {
    const cur = await d.subscriptions.get(tx, sub.wallet_id, sub.id, true);
    if (cur?.status !== 'pending' || cur.payment_method !== sub.payment_method) return;
    const reason = `replaced by a checkout paid by ${input.payment_method}`;
    await applyTransition(d, tx, cur, { type: 'checkout_failed' }, unixSeconds(d.clock), {}, { reason });
  });
  // A retry on the old method in another tab may have issued a fresh invoice in between: withdrawn too.
  await callMessage(d.bus, messages.expireOpenPayments, ref).catch((err) =>
    d.log.warn({ err, subscription_id: sub.id }, 'could not expire the payments of a replaced checkout'),
  );
  return openCheckout(d, input, tries);
}

/**
 * The checkout an earlier request with the same Idempotency-Key opened (its answer was lost: the gateway
 * timed out or died), answered again: the same subscription and the same first payment (payments is
 * idempotent on `checkout:<subscription>`). Undefined when there is none, or it expired unpaid (then the
 * retry opens a new one), or it is older than the 24 h an Idempotency-Key lives.
 */
async function repeatCheckout(d: Deps, plan: Plan, key: string): Promise<Opened | undefined> {
  const sub = await d.subscriptions.byCheckoutKey(d.db, plan.wallet, key);
  if (!sub || sub.plan_id !== plan.id || sub.status === 'expired' || sub.created_at < unixSeconds(d.clock) - IDEMPOTENCY_KEY_LIFE_S) return undefined;
  const subscriber = await d.subscribers.get(d.db, sub.wallet_id, sub.subscriber_id);
  const manage_url =
    subscriber && (await d.subscriptions.isFirstOfSubscriber(d.db, subscriber.id, sub.id))
      ? managePageUrl(d.publicBaseUrl, d.secrets.open(subscriber.token_sealed))
      : null;
  if (sub.trial_end !== null) return { plan, sub, manage_url };
  const created = await requestPayment(d, plan, sub, {
    purpose: 'checkout',
    description: `${plan.name} (${plan.interval})`,
    // From now when the first try made no payment (payments away): an hour after the checkout began may be past.
    expires_at: Math.max(sub.created_at, unixSeconds(d.clock)) + (CHECKOUT_SECONDS[sub.payment_method] ?? 86_400),
    idempotency_key: `checkout:${sub.id}`,
  });
  return { plan, sub, manage_url, created };
}

/**
 * What a checkout refuses before it writes anything: the plan (public, accepting the method), the
 * server's provider for it, the wallet's limit, the contacts. The plan as it is now.
 */
/** Why a plan cannot be paid by this method now (the plan does not take it, or the server has no provider for it). */
export async function methodRefused(d: Deps, plan: Plan, method: PaymentMethod): Promise<{ message: string; code: string } | null> {
  if (!plan[METHOD_FLAGS[method]]) return { message: `This plan does not accept ${method} payments`, code: 'method_not_allowed' };
  const missing = (await d.methods()).availability[method];
  return missing ? { message: missing, code: 'provider_not_configured' } : null;
}

export async function checkedPlan(d: Deps, input: SubscribeInput): Promise<Plan> {
  const plan = await d.plans.getPublic(d.db, input.plan_id);
  if (!plan) throw notFound('Plan');
  const method = input.payment_method;
  // The NWC checkout has no payment_method field: there the plan is what refuses.
  const field = method === 'nwc' ? 'plan_id' : 'payment_method';
  const refused = await methodRefused(d, plan, method);
  if (refused) throw invalid([field], refused.message, refused.code);
  if (input.max_amount_sats !== undefined && input.max_amount_sats < plan.amount_sats) {
    throw invalid(['max_amount_sats'], `max_amount_sats (${input.max_amount_sats}) is below the plan's price of ${plan.amount_sats} sats`);
  }
  const contacts = contactIssues(input, { localNip05: d.localNip05 });
  if (contacts.length) throw invalidFields(contacts);
  if (input.contact_preference) {
    // The plan's channels live in the notifier; when it cannot answer (in the courtesy's 2 s), the checkout
    // is not held up for it: the preference is kept as given (a channel the plan does not offer is not used:
    // the notifier then writes to every contact of the subscriber the plan covers).
    const offered = await courtesyRead(
      d,
      () => callMessage(d.bus, notificationMessages.contactMethods, { wallet_id: plan.wallet, plan_id: plan.id }),
      'contact methods (contact_preference taken unchecked)',
      { plan_id: plan.id },
    );
    const refused = offered ? preferenceIssues(input.contact_preference, offered.methods) : [];
    if (refused.length) throw invalidFields(refused);
  }
  return plan;
}

/** The row of the subscription a checkout opens: the plan's start (a trial, or pending), nothing renewed or charged yet. */
export function newSubscriptionRow(
  plan: Plan,
  subscriberId: string,
  chosen: Pick<SubRow, 'payment_method' | 'receive_confirmations' | 'receive_reminders' | 'checkout_key'>,
  nowMs: number,
): Omit<SubRow, 'version'> {
  const now = Math.floor(nowMs / 1000);
  return {
    ...startSubscription(plan, now),
    ...chosen,
    id: newId(ID_PREFIXES.subscription, nowMs),
    wallet_id: plan.wallet,
    plan_id: plan.id,
    subscriber_id: subscriberId,
    amount_sats: plan.amount_sats,
    metadata: {},
    renewal_payment_id: null,
    renewal_for: null,
    renewal_expires_at: null,
    reminded_for: null,
    reminder_notified_at: null,
    nwc_next_attempt_at: null,
    nwc_fallback: false,
    nwc_charging_since: null,
    renewal_refused_for: null,
    renewal_refused_at: null,
    renewal_refused_reason: null,
    created_at: now,
    updated_at: now,
  };
}

/**
 * One attempt of `openCheckout`: checks the method and the wallet's limit against the plan (as it is now)
 * and the server, then commits the subscriber and the subscription (guarded by the one-live-subscription
 * index, so concurrent identical requests make one subscription) before the first payment is requested.
 * If the payment is refused the subscription expires at once, so the contact can try again; after a 503
 * it stays pending for the retry the 503 asks for (see the catch below).
 */
async function openSubscription(d: Deps, input: SubscribeInput): Promise<Opened> {
  const plan = await checkedPlan(d, input);
  const method = input.payment_method;
  const again = input.checkout_key ? await repeatCheckout(d, plan, input.checkout_key) : undefined;
  if (again) return again;

  const nowMs = d.clock.nowMs();
  const now = Math.floor(nowMs / 1000);
  const token = randomBytes(32).toString('hex');
  const opened: { sub: SubRow; subscriberCreated: boolean; same?: Opened } = await d.db
    .tx(async (tx) => {
      await d.plans.lockForCheckout(tx, plan.id);
      const { row: subscriber, created } = await d.subscribers.upsert(tx, {
        id: newId(ID_PREFIXES.subscriber, nowMs),
        wallet_id: plan.wallet,
        email: input.email ?? null,
        name: input.name ?? null,
        messenger: input.messenger ?? null,
        nostr: input.nostr ?? null,
        contact_preference: input.contact_preference ?? null,
        token_hash: createHash('sha256').update(token).digest('hex'),
        token_sealed: d.secrets.seal(token),
        created_at: now,
      });
      const row = newSubscriptionRow(
        plan,
        subscriber.id,
        {
          payment_method: method,
          receive_confirmations: input.receive_confirmations,
          receive_reminders: input.receive_reminders,
          checkout_key: input.checkout_key ?? null,
        },
        nowMs,
      );
      if (!(await d.subscriptions.insertIfNew(tx, row))) {
        if (!(await d.plans.getPublic(tx, plan.id))) throw notFound('Plan');
        throw new AlreadySubscribed();
      }
      const saved = { ...row, version: 1 };
      // A trial starts now: that is the subscriber's "subscription started" confirmation, if they want one.
      await emit(
        d,
        tx,
        saved,
        'subscription.created',
        { payment_method: method, trial: plan.trial_days > 0, notify_subscriber: plan.trial_days > 0 && saved.receive_confirmations },
        { plan_name: plan.name, email: subscriber.email, name: subscriber.name },
      );
      return { sub: saved, subscriberCreated: created };
    })
    .catch(async (err) => {
      if (!(err instanceof AlreadySubscribed)) throw err;
      // The same request running twice at once (a retry after the gateway's lease): the first one's answer.
      const same = input.checkout_key ? await repeatCheckout(d, plan, input.checkout_key) : undefined;
      if (same) return { sub: same.sub, subscriberCreated: false, same };
      throw err;
    });
  if (opened.same) return opened.same;
  const { sub, subscriberCreated } = opened;
  const manage_url = subscriberCreated ? managePageUrl(d.publicBaseUrl, token) : null;
  if (sub.status === 'active') return { plan, sub, manage_url };
  let created: CreatedPayment;
  try {
    created = await requestPayment(d, plan, sub, {
      purpose: 'checkout',
      description: `${plan.name} (${plan.interval})`,
      expires_at: now + (CHECKOUT_SECONDS[method] ?? 86_400),
      idempotency_key: `checkout:${sub.id}`,
      new_key: true,
    });
  } catch (err) {
    // A 503 (payments or its provider away, no answer in time: the payment may even exist) asks the caller to
    // retry: the checkout stays pending, and the retry (same Idempotency-Key, or the same contact and method)
    // goes on with it, so a retry makes no second subscription and the owner sees no checkout started and
    // expired at once. Unpaid, the scheduler expires it after 24 h. A refusal (an answer) expires it now.
    // Kept only where the retry can find it (by its key or the contact's e-mail): a contact without an
    // e-mail gets a new subscriber on every checkout, so its checkout would only wait out 24 h for nothing.
    const findable = !!input.checkout_key || !!input.email;
    const timedOut = err instanceof BusUnavailableError && !err.noResponders;
    const unavailable = err instanceof BusUnavailableError || (err instanceof DomainError && err.kind === 'unavailable');
    if (timedOut || (unavailable && findable)) throw err;
    await d.db.tx(async (tx) => {
      const cur = await d.subscriptions.get(tx, sub.wallet_id, sub.id, true);
      if (cur?.status === 'pending')
        await applyTransition(d, tx, cur, { type: 'checkout_failed' }, unixSeconds(d.clock), {}, { reason: EXPIRED_BECAUSE.checkoutFailed });
    });
    throw err;
  }
  await withdrawnIfReplaced(d, sub);
  return { plan, sub, manage_url, created };
}

/**
 * A checkout of the contact on another method may have replaced this one while its payment was being
 * made, withdrawing its open payments before that one existed: it is withdrawn now, as it is when the
 * other checkout comes second. The answer stays this checkout, as it would have been then.
 */
async function withdrawnIfReplaced(d: Deps, sub: SubRow): Promise<void> {
  // Best effort: the checkout is made; a database hiccup here must not turn its answer into an error.
  const cur = await d.subscriptions.get(d.db, sub.wallet_id, sub.id).catch((err) => {
    d.log.warn({ err, subscription_id: sub.id }, 'could not check whether a checkout was replaced meanwhile');
    return undefined;
  });
  if (cur?.status !== 'expired') return;
  await callMessage(d.bus, messages.expireOpenPayments, { wallet_id: sub.wallet_id, subscription_id: sub.id }).catch((err) =>
    d.log.warn({ err, subscription_id: sub.id }, 'could not expire the payment of a replaced checkout'),
  );
}
