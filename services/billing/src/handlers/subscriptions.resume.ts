import { routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { requestPayment } from '../payments-client.js';
import { toSubscription } from '../store/subscriptions.repo.js';
import { act, ownerSub } from './subscription-action.js';

/** Resumed after the paid period ended: back to pending with a renewal payment created at once. */
export const resumeSubscription = (d: Deps) =>
  routeHandler('subscriptions.resume', async (req) => {
    const { saved, now } = await act(d, ownerSub(d, req), () => ({ type: 'resume' }));
    if (saved.status === 'pending') {
      const plan = await d.plans.get(d.db, saved.wallet_id, saved.plan_id);
      const { payment } = await requestPayment(d, plan, saved, {
        purpose: 'renewal', description: `${plan?.name ?? 'Subscription'} renewal`, expires_at: now + 86_400,
        idempotency_key: `resume:${saved.id}:${saved.version}`,
      });
      await d.db.query('UPDATE billing.subscriptions SET renewal_payment_id = $2 WHERE id = $1', [saved.id, payment.id]);
    }
    return toSubscription(saved, now);
  });
