import { routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { chargeWithWallet, requestPayment } from '../payments-client.js';
import { PENDING_EXPIRY_SECONDS } from '../domain/periods.js';
import { toSubscription } from '../store/subscriptions.repo.js';
import { emit, reminderData } from '../transitions.js';
import type { Scheduler } from '../scheduler.js';
import { act, ownerSub } from './subscription-action.js';

/**
 * Resumed after the paid period ended: back to pending with a renewal payment created at once, which an
 * NWC subscription's wallet is asked to pay at once (behaviour.md). A wallet that fails leaves the
 * payment open for the subscriber to pay; the answer is the subscription either way. Resumed inside
 * the renewal lead time, the renewal payment the pause withdrew is reissued (with its reminder) at once.
 */
export const resumeSubscription = (d: Deps, scheduler: Scheduler) =>
  routeHandler('subscriptions.resume', async (req) => {
    const { saved, now } = await act(d, ownerSub(d, req), () => ({ type: 'resume' }));
    if (saved.status === 'pending') {
      const plan = await d.plans.get(d.db, saved.wallet_id, saved.plan_id);
      const created = await requestPayment(d, plan, saved, {
        purpose: 'renewal',
        description: `${plan?.name ?? 'Subscription'} renewal`,
        expires_at: now + PENDING_EXPIRY_SECONDS,
        idempotency_key: `resume:${saved.id}:${saved.version}`,
      });
      const { payment, checkout } = created;
      await d.subscriptions.setRenewalPayment(d.db, saved.id, payment.id);
      let paidByWallet = false;
      if (saved.payment_method === 'nwc' && !saved.nwc_fallback && checkout.payment_request) {
        const charged = await chargeWithWallet(d, saved, { ...payment, payment_request: checkout.payment_request }).catch((err) => ({
          paid: false as const,
          err,
        }));
        if (!charged.paid)
          d.log.info({ subscription_id: saved.id, payment_id: payment.id, result: charged }, 'resume: the NWC wallet did not pay; the invoice stays open');
        // A wallet that is gone (or was just deactivated) leaves the subscription to invoices.
        if (!charged.paid && ('no_connection' in charged || ('deactivated' in charged && charged.deactivated))) {
          await d.subscriptions.setNwcFallback(d.db, saved.wallet_id, saved.id, now);
        }
        paidByWallet = charged.paid;
      }
      // Unless the wallet paid it, the subscriber gets the payment the new period starts with, as a reminder does.
      if (!paidByWallet) {
        const reminder = { ...reminderData(created, now, saved.receive_reminders), reason: 'resumed' };
        await emit(d, d.db, { ...saved, renewal_payment_id: payment.id }, 'renewal.reminder', reminder);
      }
    }
    // Whatever is due now (a renewal payment inside the lead time) goes out before the answer.
    if (saved.status === 'active') await scheduler.runFor(saved.id);
    return toSubscription(saved, now);
  });
