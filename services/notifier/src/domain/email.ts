import type { EventEnvelope } from '@sb/contracts';

export interface Mail {
  to: string;
  subject: string;
  text: string;
}

/** Confirmations go out only when the subscriber opted in (the event says so). */
const CONFIRMATIONS = new Set(['subscription.activated', 'payment.received', 'subscription.renewed']);

const str = (v: unknown): string | undefined => (typeof v === 'string' && v.length ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const day = (unix: number) => new Date(unix * 1000).toISOString().slice(0, 16).replace('T', ' ') + ' UTC';

/**
 * The e-mail a subscriber gets for an event, or null. Billing decides who wants what (it knows the
 * subscriber's choices) and marks such events `notify_subscriber: true`; cancellations always go out.
 * Events without a subscriber e-mail address reach no one by mail.
 */
export function subscriberMail(e: EventEnvelope): Mail | null {
  const d = e.data;
  const to = str(d.subscriber_email);
  if (!to) return null;
  const wanted =
    e.event === 'subscription.cancelled' ||
    d.notify_subscriber === true ||
    (CONFIRMATIONS.has(e.event) && d.receive_confirmations === true);
  if (!wanted) return null;
  const plan = d.plan_name || 'your subscription';
  const hello = str(d.subscriber_name) ? `Hello ${d.subscriber_name},` : 'Hello,';
  const amount = num(d.amount_sats) !== undefined ? `${d.amount_sats} sats` : undefined;
  const body = (subject: string, ...lines: (string | undefined | false)[]): Mail => ({
    to,
    subject,
    text: [hello, '', ...lines.filter((l): l is string => typeof l === 'string'), '', `Subscription: ${d.subscription_id ?? '-'}`].join('\n'),
  });
  switch (e.event) {
    case 'subscription.cancelled':
      return body(`Your subscription to ${plan} was cancelled`, `Your subscription to ${plan} was cancelled. You will not be charged again.`);
    case 'renewal.reminder': {
      const due = num(d.due_at);
      const links = payLinks(d);
      return body(
        `Payment due for ${plan}`,
        `Your subscription to ${plan} renews${due ? ` on ${day(due)}` : ' soon'}${amount ? ` for ${amount}` : ''}.`,
        d.reason === 'nwc_wallet_unavailable' && 'Your connected wallet could not pay it, so please pay it yourself.',
        links.length ? 'Pay it here:' : 'Open your subscription portal to pay it.',
        ...links,
        num(d.expires_at) !== undefined && `This payment request is valid until ${day(d.expires_at as number)}.`,
      );
    }
    case 'subscription.trial_ending': {
      const end = num(d.trial_end);
      return body(`Your free trial of ${plan} is ending`, `Your free trial of ${plan} ends${end ? ` on ${day(end)}` : ' soon'}. To keep access, pay the renewal we sent you.`);
    }
    case 'nwc.wallet_disabled':
      return body(
        `Automatic payments for ${plan} were turned off`,
        `Your connected wallet failed to pay ${plan} several times in a row, so it was disconnected. Renewals will now come to you as payment requests by e-mail.`,
        str(d.last_error) && `The wallet's last answer: ${d.last_error}`,
      );
    case 'subscription.created':
      return d.trial === true
        ? body(`Your free trial of ${plan} has started`, `Your free trial of ${plan} has started. We will remind you before it ends.`)
        : body(`Your subscription to ${plan}`, `Your subscription to ${plan} was created.`);
    case 'subscription.activated':
      return body(`Your subscription to ${plan} is active`, `Your subscription to ${plan} is active${amount ? ` (${amount} per period)` : ''}. Thank you!`);
    case 'subscription.renewed':
      return body(`Your subscription to ${plan} was renewed`, `Your subscription to ${plan} was renewed. Thank you!`);
    case 'payment.received':
      return body(`Payment received for ${plan}`, `We received your payment${amount ? ` of ${amount}` : ''} for ${plan}. Thank you!`);
    default:
      return body(`News about your subscription to ${plan}`, `Your subscription to ${plan}: ${e.event.replace(/[._]/g, ' ')}.`, d.status && `Status: ${d.status}`);
  }
}

/** Whatever pays the renewal: processor checkout page, Lightning invoice, on-chain BIP21 URI. */
function payLinks(d: Record<string, unknown>): string[] {
  const out: string[] = [];
  const checkout = str(d.checkout_url);
  if (checkout) out.push(checkout);
  const invoice = str(d.payment_request);
  if (invoice) out.push(`lightning:${invoice}`);
  const bip21 = str(d.bip21_uri);
  if (bip21 && !out.some((l) => l === bip21)) out.push(bip21);
  return out;
}
