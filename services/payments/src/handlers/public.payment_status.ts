import type { PaymentStatusResponse } from '@sb/contracts';
import { notFound, routeHandler, unixSeconds, within } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { settleFromProvider } from '../confirm.js';
import { railOf } from '../providers/rail.js';
import type { PaymentRecord } from '../domain/payments.js';

/**
 * The poll is answered within this however slow the provider (a block explorer makes two calls of up to
 * PROVIDER_TIMEOUT_MS each): the gateway gives up on any answer after BUS_TIMEOUT_MS (5 s).
 */
const PROVIDER_CHECK_DEADLINE_MS = 2_500;

const answer = (p: PaymentRecord): PaymentStatusResponse => ({
  payment_id: p.id,
  status: p.status,
  paid_at: p.paid_at,
  subscription_id: p.subscription_id,
  plan_id: p.plan_id,
  purpose: p.purpose,
  // Paid: applied, not applied, or not yet decided (applied: false), which a page tells from a payments
  // service older than the field (none of the three).
  ...(p.status !== 'paid' ? {} : p.unapplied_reason ? { unapplied: true } : { applied: p.applied_at != null }),
  ...(p.status === 'expired' && p.replaced_by ? { replaced_by: p.replaced_by } : {}),
});

/**
 * The checkout page polls this. A pending payment is first checked with its provider, so a payer sees
 * "paid" as soon as the provider knows, callback or not. A provider that does not answer leaves the
 * stored status as the answer, and so does one that answers too slowly (the poll comes again).
 */
export const getPaymentStatus = (d: Deps) =>
  routeHandler('public.payment.status', async (req) => {
    const p = await d.payments.getById(d.db, req.params.id);
    if (!p) throw notFound('Payment');
    const rail = railOf(d.rails, p);
    if (p.status !== 'pending' || !rail) return answer(p);
    // Anyone may poll, as often as the public rate limit lets them: the provider is asked at most once a
    // second per payment (the page polls less often), and the stored status answers in between. A rail
    // with a recheck interval (public block explorers rate-limit) is asked at most that often instead;
    // only a poll that asks takes the gate, which a waiting callback counts on (found in review).
    const asks = rail.recheckAfterS !== undefined ? await d.payments.stampCheck(d.db, p.id, unixSeconds(d.clock), rail.recheckAfterS) : d.checks.take(p.id);
    if (!asks) return answer(p);
    const checked = rail.status!(p)
      .then(async (s) => (await settleFromProvider(d, p, s, 'status poll')).payment)
      .catch((err) => {
        d.log.warn({ err, payment_id: p.id }, 'status poll: provider check failed');
        return p;
      });
    // A check past the deadline goes on: what it finds is applied, and the next poll answers it.
    return answer(await within(checked, PROVIDER_CHECK_DEADLINE_MS, () => p));
  });
