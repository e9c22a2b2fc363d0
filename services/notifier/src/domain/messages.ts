import {
  ALWAYS_SENT_NOTICES,
  type CancelledBy,
  EXPIRED_BECAUSE,
  fiatText,
  htmlText as esc,
  NOT_IN_NAMES,
  satsText,
  utcMinute as day,
  type EventEnvelope,
  type PaymentMethod,
} from '@sb/contracts';
import type { Message } from '../channels/outcome.js';

/** Confirmations go out only when the subscriber opted in (billing marks the event `notify_subscriber`). */
const CONFIRMATIONS = new Set(['subscription.activated', 'payment.received', 'subscription.renewed']);
/** Subscriber notices no setting turns off (behaviour.md: cancellation and plan archive always). */
const ALWAYS_TO_SUBSCRIBER = new Set(['subscription.cancelled']);

/**
 * Which opt-in a subscriber notice is sent under (billing marks it `notify_subscriber` from that one), so
 * which one its one-click unsubscribe turns off. Notices not here are always sent and offer none.
 */
const OPT_OUT_KIND: Record<string, 'reminders' | 'confirmations'> = {
  'renewal.reminder': 'reminders',
  'subscription.trial_ending': 'reminders',
  'subscription.past_due': 'reminders',
  'subscription.payment_failed': 'reminders',
  'subscription.created': 'confirmations',
  'subscription.activated': 'confirmations',
  'subscription.renewed': 'confirmations',
  'payment.received': 'confirmations',
};
export const optOutKind = (event: string): 'reminders' | 'confirmations' | undefined => OPT_OUT_KIND[event];

const str = (v: unknown): string | undefined => (typeof v === 'string' && v.length ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
/**
 * How a receipt names the way a payment was made. An NWC subscription's invoice is a Lightning invoice
 * the wallet pays, or the subscriber by hand once the wallet failed: the receipt cannot tell which.
 */
const PAID_WITH: Record<PaymentMethod, string> = {
  lightning: 'Lightning',
  onchain: 'on-chain bitcoin',
  nwc: 'Lightning',
  cardproc: 'card',
  walletproc: 'online wallet (PayPal)',
};
/**
 * The amount of an event as a message says it: what was charged in fiat first when it was (card, PayPal),
 * with the sats beside it: "$21.00 USD (21,000 sats)"; `aside` is the same in parentheses after a name,
 * " ($21.00 USD, 21,000 sats)", never parentheses in parentheses.
 */
function amountOf(d: Record<string, unknown>): { text: string; aside: string } | undefined {
  const sats = num(d.amount_sats);
  if (sats === undefined) return undefined;
  const fiat = num(d.amount_fiat);
  const currency = str(d.currency);
  if (fiat === undefined || !currency) return { text: satsText(sats), aside: ` (${satsText(sats)})` };
  return { text: `${fiatText(fiat, currency)} (${satsText(sats)})`, aside: ` (${fiatText(fiat, currency)}, ${satsText(sats)})` };
}
/** Who cancelled (the event's `cancelled_by`, set by billing from where the cancel came in), as each reader is told. */
const CANCELLED_BY: Record<CancelledBy, { subscriber: string; owner: string }> = {
  subscriber: { subscriber: 'by you', owner: 'the subscriber (portal)' },
  merchant: { subscriber: 'by the merchant', owner: 'you (API)' },
  plan_archived: { subscriber: 'by the merchant, who discontinued the plan', owner: 'you, archiving the plan' },
};
const cancelledBy = (d: Record<string, unknown>) => CANCELLED_BY[d.cancelled_by as CancelledBy] as (typeof CANCELLED_BY)[CancelledBy] | undefined;
/**
 * Who cancelled, said to the subscriber. An event from before `cancelled_by` is told from the reasons the
 * service writes itself (an owner could also have typed them).
 */
function cancelledBySubscriberWords(d: Record<string, unknown>): string {
  const by = cancelledBy(d);
  if (by) return by.subscriber;
  const reason = str(d.cancel_reason);
  return reason === 'cancelled by subscriber'
    ? CANCELLED_BY.subscriber.subscriber
    : reason === 'plan archived'
      ? CANCELLED_BY.plan_archived.subscriber
      : CANCELLED_BY.merchant.subscriber;
}
/** Why a subscription expired, from the `reason` billing writes: what was left unpaid. */
const EXPIRED_WHY: Record<string, string> = {
  [EXPIRED_BECAUSE.dunningOver]: 'its renewal was not paid in time.',
  [EXPIRED_BECAUSE.resumeUnpaid]: 'it was resumed, but the payment that starts its new period was not made within a day.',
  [EXPIRED_BECAUSE.checkoutUnpaid]: 'its first payment was not made, so it never started. Nothing was charged.',
  [EXPIRED_BECAUSE.checkoutFailed]: 'its first payment could not be set up, so it never started. Nothing was charged.',
};
/** A renewal that ended access unpaid; a free trial's (`after_trial`) ended unpaid by the end of the trial. */
const unpaid = (d: Record<string, unknown>) => (d.after_trial === true ? 'was not paid by the end of your free trial' : 'is unpaid');
/** A plan's interval as "per …" says it. */
const PER: Record<string, string> = { weekly: 'week', monthly: 'month', yearly: 'year' };

/**
 * Line breaks, other control characters, direction overrides and invisible characters in text that came
 * from outside (a subscriber's name, a plan's name, a wallet's error): each becomes a space, so that no
 * one writes lines of their own into a message ("Amount: 1 sats", a link to pay elsewhere) or turns the
 * rest of a line around. The same characters the API refuses in names (joiners of emoji and scripts stay).
 */
const UNSAFE_TEXT = new RegExp(`${NOT_IN_NAMES.source}+`, 'g');
export const clean = (v: string): string => v.replace(UNSAFE_TEXT, ' ').replace(/ {2,}/g, ' ').trim();
/** The event's data with every text value cleaned. */
const cleaned = (data: Record<string, unknown>): Record<string, unknown> =>
  Object.fromEntries(Object.entries(data).map(([k, v]) => [k, typeof v === 'string' ? clean(v) : v]));

/** Whether the subscriber is to hear of this event at all: billing knows their opt-ins, the owner chose the notices. */
export function subscriberWants(e: EventEnvelope, ownerChoice: readonly string[]): boolean {
  if (ALWAYS_TO_SUBSCRIBER.has(e.event)) return true;
  const d = e.data;
  // Expiry after dunning and a deactivated wallet: whatever the owner chose, when they concern the
  // subscriber (billing and nwc say so; a checkout that lapsed unpaid does not).
  if (ALWAYS_SENT_NOTICES.includes(e.event)) return d.notify_subscriber === true;
  const opted = d.notify_subscriber === true || (CONFIRMATIONS.has(e.event) && d.receive_confirmations === true);
  // A trial's last reminder is its trial-end notice too: an owner who chose either sends it (the
  // trial_ending event beside it no longer reaches the subscriber).
  const trialEnd = e.event === 'renewal.reminder' && d.trial_end !== undefined && ownerChoice.includes('subscription.trial_ending');
  return opted && (ownerChoice.includes(e.event) || trialEnd);
}

/** A line of our own words followed by a link of ours (never a URL that came in the event's text). */
type LinkLine = { label: string; url: string };
type Line = string | LinkLine | undefined | false | null;

/** A letter of a right-to-left script (Hebrew, Arabic, Syriac, Thaana, N'Ko, their presentation forms; Adlam and the others past U+FFFF). */
const RTL = /[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc\u{10800}-\u{10fff}\u{1e800}-\u{1efff}]/u;

/**
 * A line as HTML, each of `names` in it isolated (`<bdi>`): a right-to-left name (a plan's, a person's)
 * inside our English sentence would otherwise take the figures and brackets next to it into its own
 * direction ("(€10.50 EUR, 21,000 sats)" read out of order). Only names with right-to-left letters: the
 * others read the same either way. The text part cannot isolate (the characters that would are cleaned
 * out of names: they turn lines around).
 */
function isolating(names: readonly string[]): (line: string) => string {
  const rtl = [...new Set(names.filter((n) => RTL.test(n)))].sort((a, b) => b.length - a.length);
  if (!rtl.length) return esc;
  const any = new RegExp(rtl.map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'), 'g');
  return (line) => {
    let out = '';
    let at = 0;
    for (const m of line.matchAll(any)) {
      out += `${esc(line.slice(at, m.index))}<bdi>${esc(m[0])}</bdi>`;
      at = m.index + m[0].length;
    }
    return out + esc(line.slice(at));
  };
}

/** Lines as text and as HTML (links made clickable, `names` isolated: see isolating). */
function compose(subject: string, lines: Line[], names: readonly (string | null | undefined)[] = []): Message {
  const kept = lines.filter((l): l is string | LinkLine => typeof l === 'string' || (!!l && typeof l === 'object'));
  const htmlOf = isolating(names.filter((n): n is string => !!n));
  const link = (url: string) => `<a href="${esc(url)}">${esc(url)}</a>`;
  const html = kept
    .map((l) =>
      typeof l === 'object'
        ? `<p>${htmlOf(l.label)} ${link(l.url)}</p>`
        : l === ''
          ? ''
          : /^(https?:|lightning:|bitcoin:)\S+$/.test(l)
            ? `<p>${link(l)}</p>`
            : `<p>${htmlOf(l)}</p>`,
    )
    .join('\n');
  const text = kept.map((l) => (typeof l === 'object' ? `${l.label} ${l.url}` : l)).join('\n');
  return { subject, text, html: `<!doctype html><html><body style="font-family:sans-serif">\n${html}\n</body></html>` };
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

/**
 * The message a subscriber gets for an event. `manageUrl` is the portal (manage, pay, cancel, which
 * notices), in every message; the reader's name comes from billing. `unsubscribe`: the one-click link of
 * this kind of notice, given for e-mail (it also goes in the List-Unsubscribe header there).
 */
export function subscriberMessage(
  e: EventEnvelope,
  reader: {
    name?: string | null;
    manageUrl?: string | null;
    merchant?: string | null;
    unsubscribe?: string | null;
    /** The plan's checkout page while the plan is offered, null once it is not (undefined: not known). */
    checkoutUrl?: string | null;
  },
): Message {
  const d = cleaned(e.data);
  const who = { ...reader, name: reader.name ? clean(reader.name) : null, merchant: reader.merchant ? clean(reader.merchant) : null };
  const plan = d.plan_name || 'your subscription';
  const { text: amount, aside } = amountOf(d) ?? { text: undefined, aside: '' };
  const period = num(d.current_period_end) !== undefined ? ` until ${day(d.current_period_end as number)}` : '';
  const per = PER[str(d.interval) ?? ''];
  // A receipt: the period paid for, the payment's reference and how it was paid (behaviour.md).
  const receipt = (): (string | undefined | false)[] => {
    const start = num(d.current_period_start);
    const end = num(d.current_period_end);
    const method = str(d.payment_method);
    return [
      start !== undefined && end !== undefined && `Period: ${day(start)} to ${day(end)}`,
      amount && `Amount: ${amount}`,
      method && `Paid with: ${PAID_WITH[method as PaymentMethod] ?? method}`,
      str(d.payment_id) && `Payment reference: ${d.payment_id}`,
      str(d.subscription_id) && `Subscription reference: ${d.subscription_id}`,
    ];
  };
  /** Access has ended: the renewal can be paid until `pay_by` (the dunning end), never after. */
  const accessEnded = d.status === 'payment_failed';
  const lastPayBy = accessEnded ? num(d.pay_by) : undefined;
  /** The dunning notice's own words for paying when access has ended (the reminders of that state say it too). */
  const payToGetBack = (by: string | undefined) =>
    by ? `Pay it by ${by} to get your access back; after that the subscription ends.` : 'Pay it to get your access back before the subscription ends.';
  /**
   * The period a renewal pays for, true whenever it is paid: from the end of the current one if paid
   * before access ends (the end of grace), else a new one from the payment, which has no dates until then
   * (behaviour.md: payment_failed starts a new period at `paid_at`).
   */
  const renewalPeriod = (): string | undefined => {
    const start = num(d.renewal_period_start);
    const end = num(d.renewal_period_end);
    if (start === undefined || end === undefined) return undefined;
    const fresh = per ? `one ${per}` : 'a new period';
    const by = num(d.renewal_period_if_paid_by);
    if (d.renewal_period_from_payment === true) {
      // Days the merchant granted: the end holds while they last, or for any payment still possible when
      // they outlast the dunning window (payment_failed's `pay_by`): then there is no paying later.
      if (by !== undefined && lastPayBy !== undefined && by >= lastPayBy) return `Renewal period: from your payment to ${day(end)}.`;
      return by !== undefined
        ? `Renewal period: from your payment to ${day(end)} if paid by ${day(by)}; paid later, ${fresh} from the payment.`
        : `Renewal period: ${fresh}, starting when you pay.`;
    }
    if (by !== undefined) return `Renewal period: ${day(start)} to ${day(end)} if paid by ${day(by)}; paid later, ${fresh} from the payment.`;
    // An event from a billing before those terms.
    return `Renewal period${start === num(d.current_period_end) ? '' : ' if paid now'}: ${day(start)} to ${day(end)}`;
  };
  /** Reminders link to the portal page where the current invoice is always payable (an invoice lives a day). */
  const payInPortal = (without: string): Line =>
    who.manageUrl ? { label: 'Pay it in your portal, which always has a payable invoice:', url: who.manageUrl } : without;
  /** A step of dunning: what is unpaid, for which period, until when it can be paid (`pay_by`), where. */
  const dunning = (subject: string, state: string, payLine: (by: string | undefined) => string): Message => {
    const payBy = num(d.pay_by);
    return body(
      subject,
      `The renewal of ${plan}${aside} ${state}`,
      renewalPeriod(),
      // Its retries are over (or it was never to retry): said before how to pay by hand.
      d.wallet_failed === true && d.wallet_retries !== true && 'Your connected wallet could not pay it and is no longer asked to.',
      payLine(payBy === undefined ? undefined : day(payBy)),
      // No invoice could be made (billing says why to the merchant, not here: "below the card processor's
      // minimum" is theirs to settle); the portal has none to pay until one is.
      typeof d.renewal_refused === 'string'
        ? who.manageUrl
          ? { label: 'An invoice for it could not be made this time; we try again daily, and your portal will have it to pay:', url: who.manageUrl }
          : 'An invoice for it could not be made this time; we try again daily.'
        : // Made right after this step (the scheduler was away): not "has a payable invoice" before there is one.
          d.invoice_to_follow === true
          ? who.manageUrl
            ? { label: 'Its invoice follows in a separate message, and your portal will have it to pay:', url: who.manageUrl }
            : 'Its invoice follows in a separate message.'
          : payInPortal('Your subscription portal has a payable invoice.'),
    );
  };
  const kind = optOutKind(e.event);
  /**
   * What the portal offers in the subscription's state: `open` everything; `cancelled` (access continues)
   * nothing to pay or cancel any more; `over` (expired, ended) the history and receipts only.
   */
  const FOOTER = { open: 'Manage, pay or cancel your subscription:', cancelled: 'Manage your subscription:', over: 'Your subscriptions and receipts:' };
  const message = (state: keyof typeof FOOTER, subject: string, ...lines: Line[]): Message => ({
    ...compose(
      subject,
      [
        who.name ? `Hello ${who.name},` : 'Hello,',
        '',
        ...lines,
        '',
        who.manageUrl ? FOOTER[state] : undefined,
        who.manageUrl ?? undefined,
        // Where notices are switched off, on every channel (a cancelled or ended subscription has no switches left).
        who.manageUrl && state === 'open' && 'You also choose there which notices you get.',
        kind && who.unsubscribe && { label: kind === 'reminders' ? 'Stop these reminders:' : 'Stop these confirmations:', url: who.unsubscribe },
        who.merchant ? `— ${who.merchant}` : undefined,
      ],
      [str(d.plan_name), who.name, who.merchant],
    ),
    ...(kind && who.unsubscribe ? { unsubscribe: who.unsubscribe } : {}),
  });
  const body = (subject: string, ...lines: Line[]): Message => message('open', subject, ...lines);
  const paidBeforeCancel = (): Message => {
    const end = num(d.current_period_end);
    const continues = end !== undefined && end > e.timestamp;
    return message(
      continues ? 'cancelled' : 'over',
      `Payment received for ${plan}`,
      `We received your payment${amount ? ` of ${amount}` : ''} for ${plan}. Your subscription was cancelled, so it will not renew${continues ? `; your access continues until ${day(end)}` : '; your access has ended'}.`,
      '',
      ...receipt(),
    );
  };
  switch (e.event) {
    case 'subscription.cancelled': {
      const end = num(d.current_period_end);
      const by = cancelledBySubscriberWords(d);
      // A checkout never paid (pending, with no period: it starts and ends at once): nothing was charged, no
      // access to end. Not an immediate cancel of a period paid ahead, which also starts and ends now.
      const neverPaid = d.previous_status === 'pending' && end !== undefined && end === num(d.current_period_start);
      const continues = end !== undefined && end > e.timestamp;
      // Never paid (a free trial, in it or ended unpaid): not "charged again" (found from outside).
      const charged =
        d.in_trial === true
          ? 'It was in its free trial: nothing was charged.'
          : neverPaid || d.never_paid === true
            ? 'Nothing was charged.'
            : 'You will not be charged again.';
      return message(
        continues ? 'cancelled' : 'over',
        `Your subscription to ${plan} was cancelled`,
        `Your subscription to ${plan} was cancelled ${by}. ${charged}`,
        neverPaid ? undefined : continues ? `Your access continues until ${day(end)}.` : 'Your access has ended.',
      );
    }
    case 'renewal.reminder': {
      const due = num(d.due_at);
      const links = payLinks(d);
      const overdue = due !== undefined && due <= e.timestamp;
      // The last period of a free trial, ahead of its end: this is the trial's end notice too (one message).
      const trialEnd = overdue ? undefined : num(d.trial_end);
      return body(
        trialEnd !== undefined ? `Your free trial of ${plan} is ending: payment due` : `Payment due for ${plan}`,
        d.reason === 'resumed'
          ? `Your subscription to ${plan} was resumed: its new period starts when you pay${amount ? ` ${amount}` : ''}, within a day.`
          : accessEnded
            ? // No access, nothing renews: its period end (moved by an extend, even to a later date) is no date to pay by.
              `The renewal of ${plan}${aside} ${unpaid(d)}, so your access has ended for now.`
            : overdue
              ? // Sent after the period ended (the wallet failed at the end, an invoice replaced): overdue, not ahead.
                `The renewal of ${plan}${aside} was due on ${day(due)} and is not paid yet.`
              : trialEnd !== undefined
                ? `Your free trial of ${plan} ends on ${day(trialEnd)}. To keep access, pay ${amount ?? 'the renewal'}.`
                : `Your subscription to ${plan} renews${due ? ` on ${day(due)}` : ' soon'}${amount ? ` for ${amount}` : ''}.`,
        renewalPeriod(),
        accessEnded && payToGetBack(lastPayBy === undefined ? undefined : day(lastPayBy)),
        // After the past-due notice said the wallet would be asked again: it no longer is (disconnected).
        d.reason === 'nwc_wallet_unavailable' &&
          'Your connected wallet is no longer asked to pay it (it failed or was disconnected), so please pay it yourself.',
        links.length > 0 && 'Pay it here:',
        ...links,
        links.length > 0 && num(d.expires_at) !== undefined && `This payment request is valid until ${day(d.expires_at as number)}.`,
        payInPortal('Open your subscription portal to pay it.'),
      );
    }
    case 'subscription.trial_ending': {
      const end = num(d.trial_end);
      return body(
        `Your free trial of ${plan} is ending`,
        `Your free trial of ${plan} ends${end ? ` on ${day(end)}` : ' soon'}.`,
        d.wallet_pays === true
          ? `Your connected wallet will then be asked to pay the renewal${amount ? ` of ${amount}` : ''}.`
          : `To keep access, pay the renewal${amount ? ` of ${amount}` : ''} we sent you.`,
        renewalPeriod(),
      );
    }
    case 'nwc.wallet_disabled':
      return body(
        `Automatic payments for ${plan} were turned off`,
        `Your connected wallet failed to pay ${plan} several times in a row, so it was disconnected. Renewals will now come to you as payment requests.`,
        str(d.last_error) && `The wallet's last answer: ${d.last_error}`,
      );
    case 'subscription.created':
      return d.trial === true
        ? body(
            `Your free trial of ${plan} has started`,
            `Your free trial of ${plan} has started${num(d.current_period_end) !== undefined ? `; it ends on ${day(d.current_period_end as number)}` : ''}.`,
            d.payment_method === 'nwc'
              ? // The checkout said the wallet pays the renewals automatically: so does the notice.
                `After it, your connected wallet pays ${amount ? `${amount}${per ? ` per ${per}` : ' each period'}` : 'the subscription'} automatically; we will remind you before it ends.`
              : `After it${amount ? `, the subscription costs ${amount}${per ? ` per ${per}` : ' each period'}` : ', the subscription is paid'}; we will remind you before it ends.`,
          )
        : body(`Your subscription to ${plan}`, `Your subscription to ${plan} was created.`);
    case 'subscription.activated':
      // A checkout (or a renewal) paid before its cancel but handled after it (billing applies it as in
      // time): the subscriber was already told it was cancelled, so this is a receipt, not a welcome.
      if (d.status === 'cancelled') return paidBeforeCancel();
      return body(
        `Your subscription to ${plan} is active`,
        `Your subscription to ${plan} is active${period}${amount ? `; you paid ${amount}` : ''}. Thank you!`,
        '',
        ...receipt(),
      );
    case 'subscription.renewed':
      if (d.status === 'cancelled') return paidBeforeCancel();
      return body(
        `Your subscription to ${plan} was renewed`,
        `Your subscription to ${plan} was renewed${period}${amount ? `; you paid ${amount}` : ''}. Thank you!`,
        '',
        ...receipt(),
      );
    case 'payment.received':
      return body(`Payment received for ${plan}`, `We received your payment${amount ? ` of ${amount}` : ''} for ${plan}. Thank you!`);
    case 'subscription.past_due':
      return dunning(`Payment overdue for ${plan}`, `was not paid by the end of your ${d.after_trial === true ? 'free trial' : 'period'}.`, (by) =>
        d.wallet_retries === true
          ? `Your connected wallet could not pay it and will be asked again${by ? ` until ${by}, while your access continues` : ''}; you can also pay it yourself.`
          : by
            ? `Your access continues until ${by}; pay it before then to keep it.`
            : 'Pay it soon to keep your access.',
      );
    case 'subscription.payment_failed':
      return dunning(`Payment failed for ${plan}: your access has ended`, `${unpaid(d)}, so your access has ended for now.`, payToGetBack);
    case 'subscription.expired': {
      // No invoice could ever be made for it (the merchant's event says why): not "was not paid in time".
      const why = typeof d.renewal_refused === 'string' ? 'no invoice could be made for its renewal.' : EXPIRED_WHY[str(d.reason) ?? ''];
      return message(
        'over',
        `Your subscription to ${plan} has expired`,
        `Your subscription to ${plan} has expired${why ? `: ${why}` : '.'}`,
        // Billing tells whether the plan is still offered; a billing older than that, nothing.
        who.checkoutUrl
          ? { label: 'To subscribe again:', url: who.checkoutUrl }
          : who.checkoutUrl === null
            ? 'The merchant no longer offers this plan.'
            : "You can subscribe again at any time from the merchant's checkout page.",
      );
    }
    default:
      return body(
        `News about your subscription to ${plan}`,
        `Your subscription to ${plan}: ${e.event.replace(/[._]/g, ' ')}.`,
        str(d.status) && `Status: ${d.status}`,
      );
  }
}

const OWNER_TITLES: Record<string, string> = {
  'subscription.created': 'New subscription',
  'subscription.activated': 'Subscription activated',
  'subscription.renewed': 'Subscription renewed',
  'payment.received': 'Payment received',
  'payment.failed': 'Payment failed',
  'subscription.payment_failed': 'Subscription payment failed',
  'subscription.past_due': 'Subscription past due',
  'subscription.cancelled': 'Subscription cancelled',
  'subscription.expired': 'Subscription expired',
  'nwc.wallet_disabled': 'NWC wallet disabled',
  'payment.unapplied': 'Payment not applied: refund it',
  'plan.archived': 'Plan archived',
  'renewal.reminder': 'Renewal payment requested',
  'subscription.trial_ending': 'Trial ending',
  'subscription.paused': 'Subscription paused',
  'subscription.resumed': 'Subscription resumed',
  'subscription.extended': 'Subscription extended',
};

/** A payment's own events (events.ts): their `status` is the payment's; the payments service's name no subscriber. */
export const PAYMENT_EVENTS: ReadonlySet<string> = new Set(['payment.received', 'payment.failed']);

/** What the owner gets for an event they chose: what happened, to whom, for how much. */
export function ownerMessage(e: EventEnvelope): Message {
  const d = cleaned(e.data);
  const title = OWNER_TITLES[e.event] ?? e.event;
  const who = str(d.subscriber_email) ?? str(d.subscriber_name);
  // `status` is the state of what the event is about: shown beside that (a payment's beside the payment).
  // payment.unapplied's is its subscription's: its payment is paid, and not applied.
  const about = PAYMENT_EVENTS.has(e.event)
    ? 'payment'
    : e.event.startsWith('subscription.') || e.event === 'renewal.reminder' || e.event === 'payment.unapplied'
      ? 'subscription'
      : 'other';
  const status = (of: string) => (about === of && str(d.status) ? ` (${d.status})` : '');
  const by = cancelledBy(d);
  const end = num(d.current_period_end);
  const amount = amountOf(d)?.text;
  return compose(
    `${title}: ${d.plan_name || d.plan_id}`,
    [
      `${title} (${e.event}) on ${day(e.timestamp)}.`,
      `Plan: ${d.plan_name || '-'} (${d.plan_id})`,
      str(d.subscription_id) && `Subscription: ${d.subscription_id}${status('subscription')}`,
      who && `Subscriber: ${who}`,
      amount && `Amount: ${amount}`,
      str(d.payment_id) && `Payment: ${d.payment_id}${e.event === 'payment.unapplied' ? ' (paid, not applied)' : status('payment')}`,
      e.event === 'subscription.extended' && num(d.days) !== undefined && `Extended by: ${d.days} days`,
      (e.event === 'subscription.extended' || e.event === 'subscription.cancelled') && end !== undefined && `Period ends: ${day(end)}`,
      by && `Cancelled by: ${by.owner}`,
      // The owner's own note; the reason the service wrote for the others says no more than the line above.
      (!by || d.cancelled_by === 'merchant') && str(d.cancel_reason) && `Cancel reason: ${d.cancel_reason}`,
      str(d.reason) && `Reason: ${d.reason}`,
      str(d.last_error) && `Last error: ${d.last_error}`,
      // NWC payment.failed: one charge the wallet refused; the payment stays payable.
      e.event === 'payment.failed' && str(d.error_code) && `Wallet answer: ${d.error_code}${str(d.error_message) ? ` (${d.error_message})` : ''}`,
      e.event === 'payment.failed' && d.may_still_pay === true && 'The wallet may still pay it in the next few minutes: a payment received then counts.',
      // Dunning with no invoice made: why, for the merchant to settle (billing asks again daily).
      str(d.renewal_refused) && `No renewal invoice could be made: ${d.renewal_refused}`,
    ],
    [str(d.plan_name), str(d.subscriber_name)],
  );
}

/** The message of `POST /notification-settings/test`. */
export const testMessage = (channel: 'email' | 'messenger' | 'nostr'): Message =>
  compose('Test notification', [
    `This is a test message through the ${{ email: 'e-mail', messenger: 'messenger', nostr: 'Nostr' }[channel]} channel of your subscription service.`,
    'If you can read it, the channel works.',
  ]);
