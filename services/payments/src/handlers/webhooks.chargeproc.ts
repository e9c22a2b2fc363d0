import { DomainError, routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { settleFromProvider } from '../confirm.js';
import { callbackRef } from '../domain/payments.js';
import { logProviderFailure } from '../providers/lightning.js';
import { railOf } from '../providers/rail.js';

const invalid = () => new DomainError(400, 'Invalid callback');

/**
 * Provider callbacks on `/public/webhook/chargeproc` (POST and its GET twin share the subject): the
 * charge server's charge (Lightning or on-chain), and LNbits' payment webhook when LNbits is the
 * provider. The body is never trusted: only the charge id (or payment hash) is read from it, the payment
 * is re-read from the provider, and a paid one is confirmed before the answer, so `{received: true}`
 * means durably recorded. A duplicate answers the same and changes nothing; an unknown id or a malformed
 * body is 400 and changes nothing; a provider that cannot be asked is 503, so the provider calls again.
 */
export const chargeprocWebhook = (d: Deps) =>
  routeHandler('webhooks.chargeproc', async (req) => {
    const body = req.body;
    const ref = callbackRef(Buffer.from(body.raw, 'base64'));
    if (!ref) throw invalid();
    const payment = await d.payments.byProviderRef(d.db, ref.provider, ref.ref);
    const rail = payment && railOf(d.rails, payment);
    if (!payment || !rail) throw invalid();
    if (payment.status === 'paid') return { received: true };
    const status = await logProviderFailure(d.log, { payment_id: payment.id, provider: rail.provider }, () => rail.status!(payment));
    await settleFromProvider(d, payment, status, 'callback');
    return { received: true };
  });
