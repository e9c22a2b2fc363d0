import { randomBytes, createHash } from 'node:crypto';
import { ID_PREFIXES, METHOD_FLAGS, type SubscribeRequest } from '@sb/contracts';
import { conflict, DomainError, newId, notFound, routeHandler, unixSeconds } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { requestPayment } from '../payments-client.js';
import { startSubscription } from '../domain/lifecycle.js';
import { emit } from '../transitions.js';
import type { SubRow } from '../store/subscriptions.repo.js';

/** How long a checkout can be paid: Lightning 1 h; on-chain, card and wallet processor 24 h. */
const CHECKOUT_SECONDS = { lightning: 3600 } as Record<string, number>;

export function manageUrl(base: string, token: string): string {
  return `${base.replace(/\/$/, '')}/subscriptions_manager/manage?token=${token}`;
}

/**
 * Public checkout. The subscription row (guarded by the one-live-subscription index) is committed
 * before the first payment is requested, so concurrent identical checkouts make one subscription; if
 * the payment cannot be created the subscription expires at once, so the contact can try again.
 */
export const subscribe = (d: Deps) =>
  routeHandler('public.subscribe', async (req) => {
    const body = req.body as SubscribeRequest;
    const plan = await d.plans.getPublic(d.db, body.plan_id);
    if (!plan) throw notFound('Plan');
    const method = body.payment_method;
    if (!plan[METHOD_FLAGS[method]]) {
      throw new DomainError(422, [{ loc: ['body', 'payment_method'], msg: `This plan does not accept ${method} payments`, type: 'method_not_allowed' }]);
    }
    const missing = d.availability[method];
    if (missing) throw new DomainError(422, [{ loc: ['body', 'payment_method'], msg: missing, type: 'provider_not_configured' }]);

    const nowMs = d.clock.nowMs();
    const now = Math.floor(nowMs / 1000);
    const token = randomBytes(32).toString('hex');
    const { sub, subscriberCreated } = await d.db.tx(async (tx) => {
      const { row: subscriber, created } = await d.subscribers.upsert(tx, {
        id: newId(ID_PREFIXES.subscriber, nowMs), wallet_id: plan.wallet, email: body.email ?? null, name: body.name ?? null,
        messenger: body.messenger ?? null, nostr: body.nostr ?? null,
        token_hash: createHash('sha256').update(token).digest('hex'), token_sealed: d.secrets.seal(token), created_at: now,
      });
      const state = startSubscription(plan, now);
      const row: Omit<SubRow, 'version'> = {
        ...state, id: newId(ID_PREFIXES.subscription, nowMs), wallet_id: plan.wallet, plan_id: plan.id, subscriber_id: subscriber.id,
        payment_method: method, amount_sats: plan.amount_sats, receive_confirmations: body.receive_confirmations,
        receive_reminders: body.receive_reminders, metadata: {}, renewal_payment_id: null, renewal_for: null, renewal_expires_at: null, reminded_for: null,
        reminder_notified_at: null,
        created_at: now, updated_at: now,
      };
      try {
        await tx.query('SAVEPOINT sub');
        await d.subscriptions.insert(tx, row);
      } catch (err) {
        if ((err as { code?: string }).code === '23505') throw conflict('This contact already has a subscription to this plan');
        throw err;
      }
      const saved = { ...row, version: 1 };
      await emit(d, tx, saved, 'subscription.created', { payment_method: method, trial: plan.trial_days > 0 });
      return { sub: saved, subscriberCreated: created };
    });
    const manage_url = subscriberCreated ? manageUrl(d.publicBaseUrl, token) : null;

    if (sub.status === 'active') {
      return {
        subscription_id: sub.id, status: 'active' as const, trial: true as const, trial_days: plan.trial_days,
        message: `Your ${plan.trial_days}-day free trial of ${plan.name} has started`, manage_url,
      };
    }
    try {
      const { checkout } = await requestPayment(d, plan, sub, {
        purpose: 'checkout', description: `${plan.name} (${plan.interval})`,
        expires_at: now + (CHECKOUT_SECONDS[method] ?? 86_400), idempotency_key: `checkout:${sub.id}`,
      });
      return { ...checkout, subscription_id: sub.id, manage_url };
    } catch (err) {
      await d.db.tx(async (tx) => {
        await tx.query(`UPDATE billing.subscriptions SET status = 'expired', updated_at = $2, version = version + 1 WHERE id = $1 AND status = 'pending'`, [sub.id, unixSeconds(d.clock)]);
        await emit(d, tx, { ...sub, status: 'expired' }, 'subscription.expired', { reason: 'checkout could not be created' });
      });
      throw err;
    }
  });
