import { routeHandler, unixSeconds, type Queryable } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { confirmPaymentIn, failPaymentIn } from '../confirm.js';
import { statesAllowing, type PaymentRecord } from '../domain/payments.js';
import { paymentIntentOf, sessionRef, type CheckoutSession, type StripeCardRail } from '../providers/cardproc.js';

type Change = 'paid' | 'failed' | 'expired' | null;

/** What each Checkout Session event does to its payment, inside the transaction that records the event. */
const EFFECTS: Record<string, (d: Deps, tx: Queryable, p: PaymentRecord, s: CheckoutSession) => Promise<Change>> = {
  // 'unpaid' here is a delayed method (bank debit): its outcome comes as async_payment_succeeded / _failed.
  'checkout.session.completed': (d, tx, p, s) => (s.payment_status === 'paid' ? confirm(d, tx, p, s) : Promise.resolve(null)),
  'checkout.session.async_payment_succeeded': (d, tx, p, s) => confirm(d, tx, p, s),
  'checkout.session.async_payment_failed': async (d, tx, p) =>
    (await failPaymentIn(d, tx, p.id, 'stripe: the payment method failed (async_payment_failed)')).confirmed ? 'failed' : null,
  'checkout.session.expired': async (d, tx, p) => {
    const { from, to } = statesAllowing('expire');
    return (await d.payments.transition(tx, p.id, from, to)) ? 'expired' : null;
  },
};

async function confirm(d: Deps, tx: Queryable, p: PaymentRecord, s: CheckoutSession): Promise<Change> {
  return (await confirmPaymentIn(d, tx, p.id, paymentIntentOf(s))).confirmed ? 'paid' : null;
}

/**
 * Stripe's webhook (`/public/webhook/cardproc`). The event is verified (Stripe-Signature over the exact
 * bytes, 300 s tolerance) before anything is read from it. It acts only on one of our sessions, named by
 * `metadata.payment_id` and the session id we stored; a genuine event about anything else (another
 * integration on the account) is acknowledged so Stripe stops retrying it, and changes and records
 * nothing. Its id is recorded in the same transaction as its effect, so a redelivery answers 200 and
 * changes nothing, and `{received: true}` means both are durable. Other event types are acknowledged and ignored.
 */
export const cardprocWebhook = (d: Deps, rail: StripeCardRail) =>
  routeHandler('webhooks.cardproc', async (req) => {
    const body = req.body;
    const event = rail.verifyEvent(Buffer.from(body.raw, 'base64'), body.headers['stripe-signature']);
    const effect = EFFECTS[event.type];
    if (!effect) return { received: true };
    const session = event.data.object as CheckoutSession;
    const paymentId = session.metadata?.payment_id;
    const payment = paymentId ? await d.payments.getById(d.db, paymentId) : undefined;
    // A connected account's events carry `account`, which is part of the reference we stored.
    if (payment?.provider !== 'stripe' || payment.provider_ref !== sessionRef(session.id, event.account)) {
      d.log.info({ provider: 'stripe', event_id: event.id, event: event.type }, 'callback names no payment of ours; ignored');
      return { received: true };
    }
    const change = await d.db.tx(async (tx) => {
      if (!(await d.payments.recordCallback(tx, 'stripe', event.id, payment.id, unixSeconds(d.clock)))) return null;
      return effect(d, tx, payment, session);
    });
    if (change) d.log.info({ payment_id: payment.id, provider: 'stripe', event_id: event.id, event: event.type, via: 'callback' }, `payment ${change}`);
    return { received: true };
  });
