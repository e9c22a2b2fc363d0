import type { PaymentStatusResponse } from '@sb/contracts';
import { notFound, routeHandler, unixSeconds } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { settleFromProvider } from '../confirm.js';
import { railOf } from '../providers/rail.js';
import type { PaymentRecord } from '../domain/payments.js';

const answer = (p: PaymentRecord): PaymentStatusResponse => ({
  payment_id: p.id,
  status: p.status,
  paid_at: p.paid_at,
  subscription_id: p.subscription_id,
});

/**
 * The checkout page polls this. A pending payment is first checked with its provider, so a payer sees
 * "paid" as soon as the provider knows, callback or not. A provider that does not answer leaves the
 * stored status as the answer (the poll comes again).
 */
export const getPaymentStatus = (d: Deps) =>
  routeHandler('public.payment.status', async (req) => {
    const p = await d.payments.getById(d.db, req.params.id);
    if (!p) throw notFound('Payment');
    const rail = railOf(d.rails, p);
    if (p.status !== 'pending' || !rail) return answer(p);
    // A rail with a recheck interval (public block explorers rate-limit) is asked at most that often,
    // however often anyone polls: this endpoint is public.
    if (rail.recheckAfterS !== undefined && !(await d.payments.stampCheck(d.db, p.id, unixSeconds(d.clock), rail.recheckAfterS))) return answer(p);
    try {
      return answer((await settleFromProvider(d, p, await rail.status!(p), 'status poll')).payment);
    } catch (err) {
      d.log.warn({ err, payment_id: p.id }, 'status poll: provider check failed');
      return answer(p);
    }
  });
