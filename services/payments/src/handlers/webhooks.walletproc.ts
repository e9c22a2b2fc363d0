import { DomainError, routeHandler, unixSeconds } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { confirmPaymentIn, failPaymentIn } from '../confirm.js';
import type { PaymentRecord } from '../domain/payments.js';
import { logProviderFailure } from '../providers/lightning.js';
import type { ProviderStatus } from '../providers/rail.js';
import { orderStatus, paypalOf, transmissionOf, type PaypalClient, type PaypalOrder } from '../providers/walletproc.js';

const invalid = () => new DomainError(400, 'Invalid callback');
const PROVIDER = 'paypal';

interface WebhookEvent {
  id: string;
  event_type: string;
  // biome-ignore lint/suspicious/noExplicitAny: PayPal's resource, read field by field by the rail.
  resource: Record<string, any>;
}

function eventOf(raw: string): WebhookEvent | undefined {
  // biome-ignore lint/suspicious/noExplicitAny: the sender's JSON, checked field by field below.
  let e: any;
  try {
    e = JSON.parse(raw);
  } catch {
    return undefined;
  }
  const ok =
    e &&
    typeof e === 'object' &&
    !Array.isArray(e) &&
    typeof e.id === 'string' &&
    e.id &&
    typeof e.event_type === 'string' &&
    e.resource &&
    typeof e.resource === 'object';
  return ok ? (e as WebhookEvent) : undefined;
}

/** The payment a (verified) event is about; undefined when it is not one of ours. */
async function paymentOf(d: Deps, e: WebhookEvent): Promise<PaymentRecord | undefined> {
  if (e.event_type === 'CHECKOUT.ORDER.APPROVED') {
    const order = e.resource as PaypalOrder;
    const p = typeof order.id === 'string' ? await d.payments.byProviderRef(d.db, PROVIDER, order.id) : undefined;
    return p && order.purchase_units?.[0]?.custom_id === p.id ? p : undefined;
  }
  // Capture events name the payment (custom_id) and the order; both must agree with what we stored.
  const orderId = e.resource.supplementary_data?.related_ids?.order_id;
  const p = typeof e.resource.custom_id === 'string' ? await d.payments.getById(d.db, e.resource.custom_id) : undefined;
  return p && p.provider === PROVIDER && typeof orderId === 'string' && p.provider_ref === orderId ? p : undefined;
}

/** What the event says happened, after any provider call it needs (so none runs inside the transaction). */
async function outcomeOf(d: Deps, paypal: PaypalClient, e: WebhookEvent, p: PaymentRecord): Promise<ProviderStatus> {
  switch (e.event_type) {
    case 'CHECKOUT.ORDER.APPROVED':
      // Approved is not paid: the money moves only when we capture (idempotent, so redeliveries are safe).
      // Only an open payment is captured: one we expired (cancelled, replaced) must not take the payer's
      // money; PayPal voids the uncaptured order when its authorization window ends.
      if (p.status !== 'pending') {
        if (p.status === 'expired')
          d.log.info({ payment_id: p.id, provider: PROVIDER, event_id: e.id }, 'approved order of an expired payment left uncaptured');
        return { paid: false };
      }
      return orderStatus(await logProviderFailure(d.log, { payment_id: p.id, provider: PROVIDER }, () => paypal.capture(p.provider_ref!)));
    case 'PAYMENT.CAPTURE.COMPLETED':
      return { paid: e.resource.status === 'COMPLETED' };
    default: // PAYMENT.CAPTURE.DENIED
      return { paid: false, failed: true };
  }
}

const HANDLED = new Set(['CHECKOUT.ORDER.APPROVED', 'PAYMENT.CAPTURE.COMPLETED', 'PAYMENT.CAPTURE.DENIED']);

/**
 * PayPal webhook deliveries on `/public/webhook/walletproc`. Each is verified by PayPal itself
 * (verify-webhook-signature with this deployment's webhook id) before anything is read from it; an
 * unverifiable or malformed one is 400 and changes nothing, and a PayPal that cannot be asked is 503
 * (PayPal delivers again). A genuine event naming no payment of ours (another integration on the same
 * account) is acknowledged, so PayPal stops retrying it, and changes and records nothing. The event id
 * is recorded in the same transaction as the payment's change, so a redelivery answers 200 and changes
 * nothing, and `{received: true}` means durably recorded.
 */
export const walletprocWebhook = (d: Deps) =>
  routeHandler('webhooks.walletproc', async (req) => {
    const body = req.body;
    const paypal = paypalOf(d.rails);
    const transmission = transmissionOf(body.headers);
    const raw = Buffer.from(body.raw, 'base64').toString('utf8');
    const event = eventOf(raw);
    if (!paypal || !transmission || !event) throw invalid();
    const genuine = await logProviderFailure(d.log, { provider: PROVIDER, event_id: event.id }, () => paypal.verifyWebhook(transmission, raw));
    if (!genuine) throw invalid();
    if (!HANDLED.has(event.event_type)) return { received: true };
    if (await d.payments.callbackRecorded(d.db, PROVIDER, event.id)) return { received: true };

    const payment = await paymentOf(d, event);
    if (!payment) {
      d.log.info({ provider: PROVIDER, event_id: event.id, event_type: event.event_type }, 'callback names no payment of ours; ignored');
      return { received: true };
    }
    const outcome = await outcomeOf(d, paypal, event, payment);
    const changed = await d.db.tx(async (tx) => {
      if (!(await d.payments.recordCallback(tx, PROVIDER, event.id, payment.id, unixSeconds(d.clock)))) return null;
      if (outcome.paid) return (await confirmPaymentIn(d, tx, payment.id)).confirmed ? 'paid' : null;
      if (outcome.failed) return (await failPaymentIn(d, tx, payment.id, `paypal: ${event.event_type}`)).confirmed ? 'failed' : null;
      return null;
    });
    if (changed) d.log.info({ payment_id: payment.id, provider: PROVIDER, via: 'callback', event_type: event.event_type }, `payment ${changed}`);
    return { received: true };
  });
