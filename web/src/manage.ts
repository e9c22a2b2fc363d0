import { LINK_DOES_NOT_WORK } from '@sb/contracts/page-words';
import {
  announce,
  api,
  ApiError,
  date,
  fiat,
  h,
  INTERVALS,
  METHOD_LABELS,
  nwcShapeError,
  paymentView,
  randomKey,
  sats,
  sentence,
  setBusy,
  setMain,
  loadAgainLater,
  loadedAgain,
  stillUnavailable,
  tryAgain,
  passing,
  STATUS_LABELS,
  theirs,
  type Payable,
  unconfirmed,
  noAnswer,
  stillInProgress,
  EARLIER_TRY,
} from './common.js';
import { LATE_FOLLOW_MS, latePace, nextAsk, type PaymentStatus } from './pace.js';

interface Page<T> {
  items: T[];
  total: number;
}

interface Sub {
  id: string;
  plan_name: string;
  merchant_name?: string | null;
  /** Empty: the seller sends no messages (absent: unknown). */
  notice_channels?: string[];
  /** The kinds of notice the seller sends (absent: unknown, every switch shown). */
  notice_kinds?: ('reminders' | 'confirmations')[];
  status: string;
  amount_sats: number;
  interval: string;
  current_period_start: number;
  current_period_end: number;
  trial_end?: number | null;
  cancelled_at?: number | null;
  has_access: boolean;
  /** Until when access lasts unless a payment renews it (past_due: the end of its grace period). */
  access_until?: number | null;
  /** Until when access would last if cancelled now, as billing's cancel leaves it (null: none left). */
  access_after_cancel?: number | null;
  /** past_due, payment_failed: until when the renewal can still be paid to keep the subscription. */
  pay_by?: number | null;
  payment_method: string;
  receive_reminders?: boolean;
  receive_confirmations?: boolean;
  /** A payment was applied to it once (the payments listed may not reach back that far). */
  ever_paid?: boolean;
  /** Made with NWC, its wallet disconnected (or stopped paying): renewed by invoice until another is connected. */
  wallet_disconnected?: boolean;
  /** Its free trial runs now, by the service's clock. */
  in_trial?: boolean;
  /** Its renewal is overdue now, by the service's clock (a past_due one extended past today is not). */
  renewal_overdue?: boolean;
  /** No invoice could be made for the renewal due now (the payments service refused it); the service asks again by itself. */
  renewal_refused?: boolean;
}

interface Pay extends Payable {
  id: string;
  subscription_id: string;
  plan_name: string;
  status: string;
  created_at: number;
  paid_at?: number | null;
  payment_hash?: string | null;
  onchain_txid?: string | null;
  cardproc_payment_id?: string | null;
  walletproc_order_id?: string | null;
  /** Withdrawn: this payment (an earlier invoice, or one of the contact's earlier checkout, paid late) started the subscription. */
  replaced_by?: string;
  /** The period it paid for (absent: not applied yet, or paid before the service recorded it). */
  period_start?: number;
  period_end?: number;
  /** Paid, and bought nothing: why (the subscription had ended, the period was paid already). */
  unapplied_reason?: string;
}

interface Wallet {
  id: string;
  wallet_pubkey: string;
  relay_url: string;
  is_active: boolean;
  last_used_at?: number | null;
  last_error?: string | null;
  consecutive_failures: number;
  created_at: number;
  subscription_id?: string;
  plan_name?: string;
}

/** A wallet just connected, with what it did about a first payment still due (absent: none was due or could be asked). */
interface Connected extends Wallet {
  first_payment?: { paid: boolean; error_code?: string; message: string };
}

const TERMINAL = new Set(['cancelled', 'expired']);
/**
 * How often the portal looks at the payments it follows while the page is in view: an open one is asked at
 * every look (the checkout page, following one payment, every 2 s: pace.ts), an ended one only when its own
 * slower pace (pace.ts `latePace`) says it is due.
 */
const LOOK_EVERY_MS = 3000;

/** How a subscription or payment was paid, as the subscriber reads it on their portal. */
const paidBy = (m: string) => (m === 'nwc' ? 'Your wallet, automatically (NWC)' : (METHOD_LABELS[m] ?? m));
/** How a subscription's renewals are paid now: one whose wallet was disconnected is sent an invoice. */
const renewsBy = (s: Sub) => (s.wallet_disconnected ? 'Invoice (your wallet was disconnected)' : paidBy(s.payment_method));
// Pasted links often carry a trailing space or line break.
const token = (new URLSearchParams(location.search).get('token') ?? '').trim();

/**
 * The payments followed, by id: the open ones shown on the cards, until paid and applied or over, and
 * each card's newest one that expired (failed is final), at a slower pace (latePace) for a day after it
 * ended, since one paid late still counts (found in review: the portal said "expired" of a payment made).
 * `paidSeen`: as the checkout page keeps it (nextAsk); `nextAt`: not asked before; `endedAt`: expired then.
 */
interface Followed {
  sub: Sub;
  paidSeen: number | null;
  nextAt: number;
  endedAt?: number;
}
let watched = new Map<string, Followed>();
const followOpen = (sub: Sub): Followed => ({ sub, paidSeen: null, nextAt: 0 });
const followEnded = (sub: Sub, endedAt: number): Followed => ({ sub, paidSeen: null, nextAt: Date.now() + latePace(endedAt, Date.now()), endedAt });
/** The seller of each subscription shown: the payments list is drawn again without the subscriptions. */
let sellers = new Map<string, string>();
let pollTimer: number | undefined;
/** Settles once the wallets section shows its list or its error (wallet actions wait for it). */
let walletsShown: Promise<void> = Promise.resolve();

/** The portal's own message after an action: focused, so a screen reader reads it once (it is not a live region). */
function showNotice(text: string | (string | Node)[], focus = true): void {
  const notice = document.getElementById('notice');
  if (!notice) return;
  notice.replaceChildren(...[text].flat());
  noticeOf = null;
  if (focus) notice.focus();
}

/** The subscription the notice shown last is about, and when (set by the notices that news of it may follow). */
let noticeOf: { sub: string; at: number } | null = null;
/** How long news of the same subscription is added to a notice rather than put in its place. */
const NOTICE_FOLLOWED_MS = 60_000;

/**
 * News of a subscription: after the notice about it shown moments ago (a wallet connected that paid its
 * first payment), not in its place (found from outside: "connected" was gone a second later).
 */
function addNews(subId: string, text: (string | Node)[]): void {
  const notice = document.getElementById('notice');
  if (notice && noticeOf?.sub === subId && Date.now() - noticeOf.at < NOTICE_FOLLOWED_MS) notice.append(' ', ...text);
  else showNotice(text, false);
}

/** Set once the link was refused: the page shows the bad-link view for good. */
let refused = false;

function badLink(): void {
  // Several calls under way may each be refused: the view is drawn (and focused) once.
  if (refused) return;
  refused = true;
  // Refused after the page showed (the link replaced meanwhile): nothing on it is followed any more.
  watched = new Map();
  window.clearTimeout(pollTimer);
  document.title = LINK_DOES_NOT_WORK;
  const main = setMain(
    h('h1', {}, LINK_DOES_NOT_WORK),
    h('p', {}, 'The link you opened is not a valid subscription link, or it has been replaced by a newer one.'),
    h('p', {}, 'Use the link from your most recent message about your subscription, or ask the seller to send you a new one.'),
  );
  main.focus();
}

/**
 * A call with the page's link. A 401 means the link was replaced by a newer one (or is wrong): whatever
 * was asked, the page turns into the bad-link view here, in one place, and the call never settles, so no
 * caller goes on to show it as an error of its own (the page it would write to is gone).
 */
async function portal<T>(method: string, path: string, body?: unknown, opts: { idempotencyKey?: string; waitMs?: number } = {}): Promise<T> {
  try {
    return await api<T>(method, path, { token, body, ...opts });
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) throw err;
    badLink();
    return new Promise<T>(() => undefined);
  }
}

/**
 * Says in `el` that a change may or may not have been made, with the way to find out. `what`: nodes, so
 * that a plan's name keeps its own direction (theirs()).
 */
function sayUnconfirmed(el: HTMLElement, what: (string | Node)[]): void {
  el.replaceChildren(...what, ': we could not confirm this change yet. ', h('a', { href: location.href }, 'Reload the page'), ' to see whether it was made.');
}

/** A confirmation as a modal dialog; resolves true when confirmed. */
function confirmDialog(title: string | (string | Node)[], text: string, yes: string, no: string): Promise<boolean> {
  return new Promise((resolve) => {
    const heading = h('h2', { id: 'confirm-title' }, [title].flat());
    const dialog = h(
      'dialog',
      { 'aria-labelledby': 'confirm-title', 'aria-describedby': 'confirm-text', id: 'confirm' },
      heading,
      h('p', { id: 'confirm-text' }, text),
    );
    const close = (v: boolean) => {
      dialog.close();
      dialog.remove();
      resolve(v);
    };
    const keep = h('button', { type: 'button', class: 'secondary', onclick: () => close(false) }, no);
    const go = h('button', { type: 'button', class: 'danger', onclick: () => close(true) }, yes);
    dialog.append(h('div', { class: 'actions' }, keep, go));
    dialog.addEventListener('cancel', (e) => {
      e.preventDefault();
      close(false);
    });
    document.body.append(dialog);
    dialog.showModal();
    keep.focus();
  });
}

/** Whether the subscriber has access, and until when: renewing, running out (grace) or ending. */
function accessLine(s: Sub): string {
  if (!s.has_access) return 'No';
  const until = s.access_until ?? s.current_period_end;
  if (s.status === 'active') return `Yes, until at least ${date(until)}`;
  if (s.status === 'past_due') return `Yes, until ${date(until, true)}: pay before then to keep access without a break`;
  return `Yes, until ${date(until)}`;
}

/**
 * What the cancel dialog says follows a cancel: the access left is billing's answer (a past_due grace
 * is time to pay, not paid time: the card's access date is not what a cancel keeps, found from outside);
 * a billing older than it, none is promised. Nothing paid yet: nothing is charged "again".
 */
function cancelText(s: Sub): string {
  const paid = s.ever_paid !== false;
  const until = s.access_after_cancel;
  if (until != null) return `You keep access until ${date(until)}. ${paid ? 'After that you will not be charged again.' : 'You will not be charged.'}`;
  const charged = paid ? 'You will not be charged again.' : 'You will not be charged.';
  return until === null && s.has_access ? `Cancelling ends your access now. ${charged}` : charged;
}

/** What the notice after a cancel says of the access, from the subscription as billing has it now. */
function accessAfter(before: Sub, after: Sub | undefined): string {
  if (after?.has_access) return ` Access continues until ${date(after.access_until ?? after.current_period_end)}.`;
  return before.has_access && after ? ' Your access has ended.' : '';
}

/** What a pause by the seller means for the subscriber (behaviour.md: no renewal while paused, access to the period's end). */
function pausedText(s: Sub): string {
  const what = 'The seller has paused this subscription: it is not renewed, and you are not charged, until they resume it.';
  return s.has_access
    ? `${what} While it is paused, your access lasts until ${date(s.access_until ?? s.current_period_end)}.`
    : `${what} Your access ended with its period, on ${date(s.current_period_end)}.`;
}

/** The two notices a subscriber can turn off, as the switches name them. */
const NOTICES = [
  { kind: 'reminders', field: 'receive_reminders', label: 'Payment reminders', hint: 'renewal due, trial ending, payment overdue', name: 'Reminders' },
  {
    kind: 'confirmations',
    field: 'receive_confirmations',
    label: 'Confirmations and receipts',
    hint: 'subscription started, payment received',
    name: 'Confirmations',
  },
] as const;

/**
 * The subscription's notice switches: real checkboxes, each saved as it changes (PATCH of that field);
 * the result is said in the section's status line (a live region), a failure too, with the switch put back.
 */
function noticesSection(s: Sub, reload: () => Promise<Sub[]>): HTMLElement {
  // Switches for messages nobody would send promise what cannot happen (found from outside).
  if (s.notice_channels?.length === 0)
    return h('p', { class: 'hint notices' }, 'You get no messages about this subscription: the seller sends none by the contact details you gave.');
  // Nor a switch for a kind of notice the seller's settings never send (found from outside: "Confirmations
  // and receipts" for a plan that sends none).
  const sent = NOTICES.filter((n) => !s.notice_kinds || s.notice_kinds.includes(n.kind));
  if (!sent.length)
    return h(
      'p',
      { class: 'hint notices' },
      'The seller sends no reminders or confirmations for this subscription; cancellation and expiry notices are always sent.',
    );
  const plan = s.plan_name || 'this subscription';
  // Always in the page (not hidden while empty), so screen readers take it as a live region from the start.
  const status = h('p', { class: 'notices-status', role: 'status', id: `notices-${s.id}-status` });
  const boxes = sent.map((n) => {
    const id = `notices-${s.id}-${n.field}`;
    const box = h('input', { type: 'checkbox', id, name: n.field });
    box.checked = s[n.field] !== false;
    box.addEventListener('change', async () => {
      const wanted = box.checked;
      setBusy(box, true);
      status.textContent = 'Saving…';
      try {
        const saved = await portal<Sub>('PATCH', `/public/manage/subscription/${encodeURIComponent(s.id)}`, { [n.field]: wanted });
        s[n.field] = saved[n.field];
        box.checked = saved[n.field] !== false;
        status.replaceChildren(`${n.name} for `, theirs(plan), ` are ${box.checked ? 'on' : 'off'}.`);
      } catch (err) {
        // Billing may still save it: the switch shows what was asked, not a refusal that did not happen.
        if (unconfirmed(err)) return sayUnconfirmed(status, [`${n.name} for `, theirs(plan)]);
        // Changed elsewhere meanwhile (ended in another tab, by the seller): what it is now, as after a
        // refused cancel, not a card that still offers what was just refused (found from outside).
        box.checked = !wanted;
        if (err instanceof ApiError && err.status === 409) {
          await reload().catch(() => undefined);
          return showNotice([`${n.name} for `, theirs(plan), ` could not be changed: ${err.message}`]);
        }
        status.textContent = `${n.name} could not be changed: ${err instanceof ApiError ? err.message : 'something went wrong.'}`;
      } finally {
        setBusy(box, false);
        // The focus lost meanwhile (the page redrawn): back to the switch the person was using, if still shown.
        if (!document.getElementById('notice')?.contains(document.activeElement)) box.focus();
      }
    });
    return h('div', { class: 'choice' }, box, h('label', { for: id }, h('span', {}, `${n.label} `, h('span', { class: 'hint inline' }, `(${n.hint})`))));
  });
  return h(
    'fieldset',
    { class: 'notices' },
    h('legend', {}, 'Messages we send you', h('span', { class: 'visually-hidden' }, ` about ${plan}`)),
    ...boxes,
    h('p', { class: 'hint' }, 'Cancellation and expiry notices are always sent.'),
    status,
  );
}

/** A subscription's card; its open payment is put on it by showOpenPayment. */
function subscriptionCard(s: Sub, reload: () => Promise<Sub[]>): HTMLElement {
  const paidOnce = s.ever_paid === true;
  // Extended past today, a past_due subscription owes nothing until its new end (README, extend): not
  // "overdue" beside a period that ends in the future (found from outside).
  const owesLater = s.status === 'past_due' && s.renewal_overdue === false;
  // Pending after a resume past its period: it has been paid before (found from outside: "Waiting for the
  // first payment" beside its receipts).
  const status = owesLater
    ? 'Renewal payment due'
    : s.status === 'pending' && paidOnce
      ? 'Waiting for the renewal payment'
      : (STATUS_LABELS[s.status] ?? s.status);
  const live = !TERMINAL.has(s.status);
  // By the service's clock (found from outside: a trial over and paid, with the test clock moved, still
  // said "Free trial until" by the phone's). A billing older than the field: its own rule (inTrial in
  // services/billing/src/domain/lifecycle.ts), has_access its clock; a period past trial_end is not the
  // trial's (one extended after the trial ended without access, found from inside).
  const inTrial = s.in_trial ?? (s.trial_end != null && s.trial_end >= s.current_period_end && s.status !== 'past_due' && s.has_access);
  // A pending subscription's period starts with its first payment: it has no end to show yet; one that
  // ended before any payment never had a period (found from outside: "Current period ends" a past date).
  // Ended by the service's clock (has_access), not the browser's: a wrong device clock, or a test clock,
  // showed "Current period ends" for a period already over.
  // Without access by that clock the period is over whatever the status (found from outside: a paused one
  // whose period ended said "Current period ends" a past date).
  const ended = (s.status === 'past_due' && !owesLater) || s.status === 'payment_failed' || !s.has_access;
  const period =
    s.status === 'pending' || (!live && !paidOnce && !s.trial_end)
      ? null
      : [h('dt', {}, s.status === 'active' ? 'Renews on' : ended ? 'Period ended' : 'Current period ends'), h('dd', {}, date(s.current_period_end))];
  const facts = h(
    'dl',
    { class: 'facts' },
    h('dt', {}, 'Status'),
    h('dd', { class: `status-${s.status}` }, status),
    h('dt', {}, 'Price'),
    h('dd', {}, `${sats(s.amount_sats)} per ${INTERVALS[s.interval] ?? s.interval}`),
    // Nothing was paid yet (a checkout, a trial, or one that ended unpaid): the method it is paid by.
    h('dt', {}, paidOnce ? 'Paid by' : 'Payment method'),
    h('dd', {}, inTrial && !paidOnce ? `Trial, then ${renewsBy(s)}` : renewsBy(s)),
    inTrial ? [h('dt', {}, 'Free trial until'), h('dd', {}, date(s.trial_end))] : null,
    period,
    h('dt', {}, 'Access'),
    h('dd', {}, accessLine(s)),
    s.pay_by ? [h('dt', {}, 'Can be renewed until'), h('dd', {}, date(s.pay_by, true))] : null,
  );
  const card = h(
    'article',
    { class: 'card', id: `sub-${s.id}`, 'aria-labelledby': `sub-${s.id}-name` },
    h('h3', { id: `sub-${s.id}-name`, tabindex: -1, dir: 'auto' }, s.plan_name || 'Subscription'),
    s.merchant_name ? h('p', { class: 'seller' }, 'From ', theirs(s.merchant_name)) : null,
    facts,
    s.status === 'paused' ? h('p', { class: 'paused' }, pausedText(s)) : null,
  );
  if (live) {
    const msg = h('p', { class: 'status', role: 'status', id: `sub-${s.id}-status` });
    // Kept while a cancel's outcome is unknown: pressed again, it is the same request, answered as the first
    // one was (found from outside: "already cancelled", a conflict, for a cancel that went through).
    let cancelKey: string | null = null;
    const cancel = h(
      'button',
      {
        type: 'button',
        class: 'danger',
        onclick: async () => {
          const ok = await confirmDialog(
            ['Cancel ', theirs(s.plan_name || 'this subscription'), '?'],
            cancelText(s),
            'Cancel subscription',
            'Keep subscription',
          );
          if (!ok) return void cancel.focus();
          setBusy(cancel, true);
          try {
            // The answer's message has the date in ISO form: the notice says it once, as a person reads it.
            cancelKey ??= randomKey();
            await portal<{ message: string }>('POST', `/public/manage/subscription/${encodeURIComponent(s.id)}/cancel`, undefined, {
              idempotencyKey: cancelKey,
            });
            const now = (await reload()).find((x) => x.id === s.id);
            showNotice([theirs(s.plan_name || 'Your subscription'), ` is cancelled.${accessAfter(s, now)}`]);
          } catch (err) {
            // Changed elsewhere meanwhile (another tab, the seller): what it is now, not a card that contradicts it.
            if (err instanceof ApiError && err.status === 409) {
              await reload().catch(() => undefined);
              return showNotice([theirs(s.plan_name || 'Your subscription'), `: ${err.message}`]);
            }
            setBusy(cancel, false);
            if (!unconfirmed(err)) cancelKey = null;
            if (unconfirmed(err)) sayUnconfirmed(msg, ['Cancelling ', theirs(s.plan_name || 'this subscription')]);
            else msg.textContent = err instanceof ApiError ? err.message : 'The subscription could not be cancelled.';
            // Back on the button, next to the message (a dialog took it meanwhile).
            cancel.focus();
          }
        },
      },
      'Cancel subscription',
      // Every card has one: the plan tells them apart in a list of buttons.
      h('span', { class: 'visually-hidden' }, ` to ${s.plan_name || 'this subscription'}`),
    );
    card.append(noticesSection(s, reload), h('div', { class: 'actions' }, cancel), msg);
  }
  return card;
}

function reference(p: Pay): string | null {
  return p.payment_hash ?? p.onchain_txid ?? p.cardproc_payment_id ?? p.walletproc_order_id ?? null;
}

/** The seller of each subscription, as its messages name them: a receipt names who was paid. */
const sellersOf = (subs: Sub[]): Map<string, string> => new Map(subs.flatMap((s) => (s.merchant_name ? [[s.id, s.merchant_name] as const] : [])));

function paymentsSection(payments: Pay[], sellers: Map<string, string>): HTMLElement {
  const section = h('section', { id: 'payments', 'aria-labelledby': 'payments-heading' }, paymentsHeading());
  if (!payments.length) {
    section.append(h('p', {}, 'No payments yet.'));
    return section;
  }
  const list = h('ul', { class: 'payments' });
  for (const p of payments) {
    const price = fiat(p.amount_fiat, p.currency);
    const replaced = p.status === 'expired' && p.replaced_by;
    // Found from outside: "Paid" and a receipt for money that bought nothing, with no word of a refund.
    const unapplied = p.status === 'paid' && p.unapplied_reason;
    const label = unapplied
      ? 'Paid, not applied'
      : p.status === 'paid'
        ? 'Paid'
        : p.status === 'pending'
          ? 'Open'
          : replaced
            ? 'Not due'
            : p.status === 'expired'
              ? 'Expired, not paid'
              : 'Failed';
    const item = h(
      'li',
      { class: 'payment-row' },
      h('span', {}, h('strong', { dir: 'auto' }, p.plan_name), ` · ${sats(p.amount_sats)}${price ? ` (${price})` : ''}`),
      h('span', { class: `pill pill-${p.status}` }, label),
      h('span', { class: 'hint' }, date(p.paid_at ?? p.created_at)),
      // Found from outside: "Expired, not paid" beside an active subscription nobody seemed to have paid.
      replaced ? h('span', { class: 'hint' }, 'Another payment of yours started this subscription: nothing is due on this one.') : null,
      unapplied
        ? h(
            'span',
            { class: 'hint' },
            `This payment was not applied. ${p.unapplied_reason!.replace(/[\s.]+$/, '')}. The seller is told to refund it; please contact them.`,
          )
        : null,
    );
    if (p.status === 'paid') {
      const ref = reference(p);
      item.append(
        h(
          'details',
          { class: 'receipt' },
          h('summary', {}, 'Receipt', h('span', { class: 'visually-hidden' }, ` for ${p.plan_name}, ${date(p.paid_at)}`)),
          h(
            'dl',
            { class: 'facts' },
            h('dt', {}, 'Receipt number'),
            h('dd', { class: 'mono' }, p.id),
            sellers.has(p.subscription_id) ? [h('dt', {}, 'Seller'), h('dd', {}, theirs(sellers.get(p.subscription_id)!))] : null,
            h('dt', {}, 'Plan'),
            h('dd', {}, theirs(p.plan_name)),
            h('dt', {}, 'Amount'),
            h('dd', {}, `${sats(p.amount_sats)}${price ? ` (${price})` : ''}`),
            h('dt', {}, 'Paid on'),
            h('dd', {}, date(p.paid_at, true)),
            unapplied ? [h('dt', {}, 'Applied'), h('dd', {}, 'No: to be refunded by the seller')] : null,
            // What it paid for (found from outside: a receipt that did not say).
            p.period_start && p.period_end ? [h('dt', {}, 'Period'), h('dd', {}, `${date(p.period_start)} to ${date(p.period_end)}`)] : null,
            h('dt', {}, 'Method'),
            h('dd', {}, paidBy(p.payment_method)),
            ref ? [h('dt', {}, 'Reference'), h('dd', { class: 'mono' }, ref)] : null,
          ),
          h('button', { type: 'button', class: 'secondary', onclick: () => window.print() }, 'Print'),
        ),
      );
    }
    list.append(item);
  }
  section.append(list);
  return section;
}

function walletsHeading(): HTMLElement {
  return h('h2', { id: 'wallets-heading', tabindex: -1 }, 'Wallets for automatic payments');
}

function walletsSection(wallets: Wallet[], subs: Sub[], reload: () => Promise<Sub[]>): HTMLElement {
  const section = h(
    'section',
    { id: 'wallets', 'aria-labelledby': 'wallets-heading' },
    walletsHeading(),
    h(
      'p',
      { class: 'hint' },
      'A connected wallet (Nostr Wallet Connect) pays your renewals by itself. Disconnect it at any time: you then pay each renewal from an invoice.',
    ),
  );
  const active = wallets.filter((w) => w.is_active);
  if (!wallets.length) section.append(h('p', {}, 'No wallet is connected.'));
  const list = h('ul', { class: 'wallets' });
  // Two connections to one wallet service look alike: the plan each pays for tells them apart.
  const planOf = (w: Wallet) => subs.find((s) => s.id === w.subscription_id)?.plan_name || w.plan_name || '';
  for (const w of wallets) {
    const plan = planOf(w);
    const item = h(
      'li',
      { class: 'card' },
      h('p', {}, h('strong', {}, `Wallet ${w.wallet_pubkey}…`), ` · ${w.is_active ? 'Connected' : 'Disconnected'}`),
      // Not "Paid" for one disconnected: it may never have paid anything (found from outside).
      plan ? h('p', {}, `${w.is_active ? 'Pays' : 'Was set to pay'} the renewals of `, theirs(plan), '.') : null,
      h('p', { class: 'hint' }, `Relay ${w.relay_url}. Connected on ${date(w.created_at)}${w.last_used_at ? `, last used ${date(w.last_used_at)}` : ''}.`),
      w.last_error ? h('p', { class: 'error' }, `Last payment failed: ${w.last_error}`) : null,
    );
    if (w.is_active) {
      const msg = h('p', { class: 'status', role: 'status' });
      const b = h(
        'button',
        {
          type: 'button',
          class: 'danger',
          onclick: async () => {
            const ok = await confirmDialog(
              'Disconnect this wallet?',
              'Your renewals will no longer be paid automatically; you will get an invoice instead.',
              'Disconnect wallet',
              'Keep connected',
            );
            if (!ok) return void b.focus();
            setBusy(b, true);
            try {
              const r = await portal<{ message: string }>('DELETE', `/public/manage/wallets/${encodeURIComponent(w.id)}`);
              await reload();
              await walletsShown;
              showNotice(r.message);
            } catch (err) {
              setBusy(b, false);
              msg.textContent = err instanceof ApiError ? err.message : 'The wallet could not be disconnected.';
              b.focus();
            }
          },
        },
        'Disconnect',
        h('span', { class: 'visually-hidden' }, ` wallet ${w.wallet_pubkey}${plan ? ` of ${plan}` : ''}`),
      );
      item.append(h('div', { class: 'actions' }, b), msg);
    }
    list.append(item);
  }
  if (wallets.length) section.append(list);

  // A wallet pays the renewals of subscriptions made with NWC (one whose wallet was disconnected renews
  // by invoice until another is connected); other subscriptions keep the method they were made with.
  const eligible = subs.filter((s) => !TERMINAL.has(s.status) && s.payment_method === 'nwc');
  if (!eligible.length) {
    // Not "subscribe with NWC": the contact's live subscription to the plan makes that a 409 (found from outside).
    section.append(h('p', { class: 'hint' }, 'A wallet pays automatically only for a subscription started with "Nostr Wallet Connect" on its checkout page.'));
  } else {
    const named = (s: Sub) => [theirs(s.plan_name), ` (${sats(s.amount_sats)} per ${INTERVALS[s.interval] ?? s.interval})`];
    // Connecting to a subscription that has a wallet replaces that wallet: the choice says so.
    const hasWallet = (s: Sub) => active.some((w) => w.subscription_id === s.id);
    // The one offered first is one without a wallet, so a quick submit does not replace a working one.
    eligible.sort((a, b) => Number(hasWallet(a)) - Number(hasWallet(b)));
    // Choices, not a <select>: a select shows one line of its option, cut at 200% zoom on a phone
    // (found from outside), where a plan's name and its wallet note are what the choice is made by.
    const choices = eligible.map((s, i) =>
      h(
        'div',
        { class: 'choice' },
        h('input', { type: 'radio', name: 'connect-subscription', id: `connect-sub-${s.id}`, value: s.id, checked: i === 0 }),
        h('label', { for: `connect-sub-${s.id}` }, h('span', {}, ...named(s), hasWallet(s) ? ', replaces its connected wallet' : '')),
      ),
    );
    const chosenId = () => form.querySelector<HTMLInputElement>('input[name=connect-subscription]:checked')?.value ?? eligible[0]!.id;
    const input = h('textarea', {
      id: 'connect-nwc',
      rows: 3,
      class: 'mono',
      spellcheck: 'false',
      autocomplete: 'off',
      'aria-describedby': 'connect-nwc-hint connect-nwc-error',
    });
    const error = h('p', { id: 'connect-nwc-error', class: 'field-error' });
    const status = h('p', { class: 'status', role: 'status', id: 'connect-status' });
    const submit = h('button', { type: 'submit' }, 'Connect wallet');
    const form = h(
      'form',
      { id: 'connect-form', novalidate: true },
      h('h3', {}, active.length ? 'Connect another wallet' : 'Connect a wallet'),
      h('fieldset', { id: 'connect-subscription' }, h('legend', {}, 'Subscription'), ...choices),
      h(
        'div',
        { class: 'field' },
        h('label', { for: 'connect-nwc' }, 'Wallet connection string'),
        h('p', { class: 'hint', id: 'connect-nwc-hint' }, 'From your wallet\'s "Nostr Wallet Connect" settings; starts with nostr+walletconnect://.'),
        input,
        error,
      ),
      submit,
      status,
    );
    // Sent again unchanged after an answer that did not come, the connect is a retry: the service answers
    // it as it ended (a wallet is not asked twice for the first payment).
    let sentKey: { body: string; key: string } | null = null;
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const shape = nwcShapeError(input.value);
      error.textContent = shape ?? '';
      if (shape) {
        input.setAttribute('aria-invalid', 'true');
        input.focus();
        return;
      }
      input.removeAttribute('aria-invalid');
      setBusy(submit, true);
      status.textContent = 'Checking your wallet…';
      try {
        const check = await api<{ valid: boolean; error?: string | null }>('POST', '/public/nwc/validate', { body: { nwc_string: input.value.trim() } });
        if (!check.valid) {
          error.textContent = check.error ? sentence(check.error) : 'This wallet connection cannot be used.';
          status.textContent = '';
          input.setAttribute('aria-invalid', 'true');
          input.focus();
          return;
        }
        const id = chosenId();
        const chosen = eligible.find((s) => s.id === id);
        const body = { subscription_id: id, nwc_connection_string: input.value.trim() };
        const sent = JSON.stringify(body);
        if (sentKey?.body !== sent) sentKey = { body: sent, key: randomKey() };
        // A first payment still due is asked of the wallet at once: the route waits up to 75 s for it.
        status.textContent = chosen && waitsForFirst(chosen) ? 'Your wallet is paying the first payment…' : 'Connecting your wallet…';
        const r = await portal<Connected>('POST', '/public/manage/wallets', body, { idempotencyKey: sentKey.key, waitMs: 90_000 });
        sentKey = null;
        status.textContent = '';
        // A page that could not be drawn again does not undo what was said (found in review: the wallet's
        // payment was reported as a failed connect).
        const now = await reload().then(
          (subs) => subs.find((s) => s.id === id),
          () => undefined,
        );
        await walletsShown;
        // The service says what became of a first payment still due (found in review: words from before
        // the connect said "pay it from the invoice" of one paid meanwhile). An earlier version of it says
        // nothing: one still due is paid from the invoice.
        const first = r.first_payment;
        const then = first
          ? sentence(first.message)
          : now && waitsForFirst(now)
            ? 'It was not asked to make the first payment, due now: pay that from the invoice on the subscription.'
            : '';
        showNotice([
          `Wallet ${r.wallet_pubkey}… connected: it pays the renewals of `,
          ...(chosen ? named(chosen) : ['your subscription']),
          ' from now on.',
          then ? ` ${then}` : '',
        ]);
        noticeOf = { sub: id, at: Date.now() };
      } catch (err) {
        // Sent again after no settling answer, it is the same request (found in review: a lost connection or
        // "still in progress" made the next click a new one, which could ask the wallet again).
        if (!noAnswer(err)) sentKey = null;
        // No answer in time: the wallet may be connected, and may have paid (found in review: said as a failure).
        if (stillInProgress(err)) status.textContent = EARLIER_TRY;
        else if (unconfirmed(err)) sayUnconfirmed(status, ['Connecting your wallet']);
        else status.textContent = err instanceof ApiError ? err.message : 'The wallet could not be connected.';
      } finally {
        setBusy(submit, false);
        if (submit.isConnected && document.activeElement === document.body) submit.focus();
      }
    });
    section.append(form);
  }
  return section;
}

type Outcome<T> = { ok: T } | { err: unknown };
const settle = <T>(p: Promise<T>): Promise<Outcome<T>> =>
  p.then(
    (ok) => ({ ok }),
    (err: unknown) => ({ err }),
  );

function fetchWallets(): Promise<Outcome<Page<Wallet>>> {
  return settle(portal<Page<Wallet>>('GET', '/public/manage/wallets?limit=50'));
}

/**
 * Puts the wallets in place of `holder` once they arrive. They come from another service than the
 * subscriptions: when that request fails only this section says so (with a retry), the rest works.
 */
async function showWallets(holder: HTMLElement, request: Promise<Outcome<Page<Wallet>>>, subs: Sub[], focus = false): Promise<void> {
  const r = await request;
  if ('ok' in r) {
    const section = walletsSection(r.ok.items, subs, load);
    holder.replaceWith(section);
    if (focus) section.querySelector<HTMLElement>('#wallets-heading')?.focus();
    return;
  }
  const retry = retryButton('your wallets', () => {
    section.setAttribute('aria-busy', 'true');
    walletsShown = showWallets(section, fetchWallets(), subs, true);
  });
  const section = h(
    'section',
    { id: 'wallets', 'aria-labelledby': 'wallets-heading' },
    walletsHeading(),
    h(
      'p',
      { class: 'error', role: 'alert', id: 'wallets-error' },
      `Your wallets could not be loaded. ${r.err instanceof ApiError ? r.err.message : 'Something went wrong.'}`,
    ),
    h('div', { class: 'actions' }, retry),
  );
  holder.replaceWith(section);
  if (focus) retry.focus();
}

function subscriptionsAndPayments(): Promise<[Page<Sub>, Page<Pay>]> {
  return Promise.all([portal<Page<Sub>>('GET', '/public/manage/subscriptions?limit=200'), portal<Page<Pay>>('GET', '/public/manage/payments?limit=50')]);
}

/** Each subscription's open payment: the newest pending one that can still be paid. */
function openPayments(payments: Pay[]): Map<string, Pay> {
  const open = new Map<string, Pay>();
  const now = Date.now() / 1000;
  for (const p of payments) if (p.status === 'pending' && (!p.expires_at || p.expires_at > now) && !open.has(p.subscription_id)) open.set(p.subscription_id, p);
  return open;
}

/**
 * A "Try again" for a part of the page that could not be loaded; `again` draws that part anew. Once
 * pressed it says it is loading, aloud too (a focused button's new name is not read out), and keeps the
 * focus (setBusy).
 */
function retryButton(what: string, again: () => void): HTMLButtonElement {
  const button = h(
    'button',
    {
      type: 'button',
      class: 'secondary',
      onclick: () => {
        setBusy(button, true);
        button.textContent = 'Loading…';
        announce(`Loading ${what}…`);
        again();
      },
    },
    'Try again',
  );
  return button;
}

function paymentsHeading(): HTMLElement {
  return h('h2', { id: 'payments-heading', tabindex: -1 }, 'Payments and receipts');
}

function fetchPayments(): Promise<Outcome<Page<Pay>>> {
  return settle(portal<Page<Pay>>('GET', '/public/manage/payments?limit=50'));
}

/**
 * A first payment paid and not applied yet (billing hears of it a moment after the payments service):
 * found from outside, a wallet connected in the portal paid it and the card, drawn in that moment, said
 * the invoice "ran out" and offered a fresh one.
 */
const paidFirst = (payments: Pay[], s: Sub): Pay | undefined =>
  waitsForFirst(s) ? payments.find((p) => p.subscription_id === s.id && p.status === 'paid') : undefined;

/** Waiting for its first payment (not a resume's: that one has periods behind it). */
function waitsForFirst(s: Sub): boolean {
  return s.status === 'pending' && !s.ever_paid;
}

/**
 * What a renewal invoice's hint says when the service replaces it as it expires: until when the renewal can
 * be paid (overdue: the end of the dunning window), or, for one that expires before the period ends, by
 * when it renews on time (found from outside: "Payable until" a day before "Renews on").
 */
function payUntil(s: Sub, open: Pay): string | undefined {
  const replaced = 'a new invoice replaces this one if it expires first.';
  if (s.pay_by) return `Pay by ${date(s.pay_by, true)} to keep your subscription; ${replaced}`;
  if (s.status === 'active' && open.expires_at && open.expires_at < s.current_period_end)
    return `Pay by ${date(s.current_period_end, true)} to renew on time; ${replaced}`;
  return undefined;
}

/** The open payment a subscription card shows (payable right there), in place of the one it showed; `paid`: see paidFirst. */
function showOpenPayment(card: HTMLElement, s: Sub, open: Pay | undefined, paid?: Pay): void {
  card.querySelector('.open-payment')?.remove();
  if (TERMINAL.has(s.status)) return;
  if (!open && paid) {
    card.querySelector('.facts')?.after(h('section', { class: 'open-payment' }));
    showReceived(card, s);
    return;
  }
  // A checkout whose invoice ran out unpaid: a fresh one here (found from outside: "Waiting for the first
  // payment" with nothing to pay it with). Not a resume's payment or a renewal: those are reissued by the service.
  const ranOut = !open && waitsForFirst(s) && !s.trial_end;
  // No invoice could be made for the renewal (found from outside: the notice sent the subscriber here to pay,
  // and the card said nothing).
  const refused = !open && s.renewal_refused === true;
  if (!open && !ranOut && !refused) return;
  const heading = h('h4', { tabindex: -1 }, 'Payment due');
  const section = h('section', { class: 'open-payment', 'aria-label': `Payment due for ${s.plan_name}` }, heading);
  if (open) section.append(paymentView(open, `pay-${open.id}`, payUntil(s, open)));
  else if (refused)
    section.append(
      h(
        'p',
        { id: `refused-${s.id}` },
        // Not "daily": a resume's payment is asked again hourly, and an NWC wallet is charged, not sent it.
        "An invoice for this renewal could not be made yet: the seller's payment provider did not take it. We try again by ourselves.",
      ),
    );
  else {
    const msg = h('p', { class: 'status', role: 'status' });
    const fresh = h(
      'button',
      {
        type: 'button',
        id: `fresh-${s.id}`,
        onclick: async () => {
          setBusy(fresh, true);
          msg.textContent = 'Getting a fresh invoice…';
          try {
            const p = await portal<Pay>('POST', `/public/manage/subscription/${encodeURIComponent(s.id)}/invoice`);
            showOpenPayment(card, s, p);
            watched.set(p.id, followOpen(s));
            schedulePoll();
            // The list shows it too (found in review: only after a reload).
            const drawn = paymentsDrawn;
            void fetchPayments().then((r) => {
              if ('ok' in r && drawn === paymentsDrawn) drawPayments(r.ok.items);
            });
            announce('A fresh invoice is ready');
            card.querySelector<HTMLElement>('.open-payment h4')?.focus();
          } catch (err) {
            setBusy(fresh, false);
            msg.textContent = err instanceof ApiError ? err.message : 'A fresh invoice could not be had right now. Please try again.';
          }
        },
      },
      'Get a fresh invoice',
    );
    section.append(h('p', {}, 'The invoice for the first payment ran out before it was paid.'), h('div', { class: 'actions' }, fresh), msg);
  }
  card.querySelector('.facts')?.after(section);
}

/**
 * Puts the payments in place of `holder`, and each open payment on its card (added to the card, not a
 * redrawn card: what the card says after an action, and a switch being saved, stay). The payments come
 * from another service than the subscriptions: when that request fails or hangs only this section says
 * so, with a retry that asks for the payments alone. A holder no longer in the page was replaced by a
 * newer drawing, which asked for its own.
 */
function showPayments(holder: HTMLElement, r: Outcome<Page<Pay>>, subs: Sub[], focus = false): void {
  if (!holder.isConnected) return;
  if ('ok' in r) {
    const section = paymentsSection(r.ok.items, sellers);
    paymentsDrawn++;
    holder.replaceWith(section);
    const open = openPayments(r.ok.items);
    for (const s of subs) {
      const card = document.getElementById(`sub-${s.id}`);
      if (card) showOpenPayment(card, s, open.get(s.id), paidFirst(r.ok.items, s));
    }
    watch(subs, open, r.ok.items);
    if (focus) section.querySelector<HTMLElement>('#payments-heading')?.focus();
    return;
  }
  const retry = retryButton('your payments', () => {
    section.setAttribute('aria-busy', 'true');
    void fetchPayments().then((again) => showPayments(section, again, subs, true));
  });
  const section = h(
    'section',
    { id: 'payments', 'aria-labelledby': 'payments-heading' },
    paymentsHeading(),
    h(
      'p',
      { class: 'error', role: 'alert', id: 'payments-error' },
      `Payments could not be loaded right now. ${r.err instanceof ApiError ? r.err.message : 'Something went wrong.'}`,
    ),
    h('div', { class: 'actions' }, retry),
  );
  holder.replaceWith(section);
  if (focus) retry.focus();
}

/** How long the first drawing waits for the payments (usually there with the subscriptions) before it goes on without them. */
const PAYMENTS_WAIT_MS = 1500;

/** Draws the page; resolves with the subscriptions it shows. */
async function load(): Promise<Sub[]> {
  const wallets = fetchWallets();
  // The payments come from another service than the subscriptions: a hung or failed payments service
  // must not keep the subscriber from their subscriptions (cancel, notices), only from its own part.
  const payments = fetchPayments();
  const subs = await portal<Page<Sub>>('GET', '/public/manage/subscriptions?limit=200');
  sellers = sellersOf(subs.items);
  const early = await Promise.race([payments, sleep(PAYMENTS_WAIT_MS).then(() => undefined)]);
  // Its nodes, not its text: a plan name in it keeps its own direction.
  const notice = [...(document.getElementById('notice')?.childNodes ?? [])];
  const subsSection = h('section', { 'aria-labelledby': 'subs-heading' }, h('h2', { id: 'subs-heading' }, 'Subscriptions'));
  if (!subs.items.length) subsSection.append(h('p', {}, 'You have no subscriptions.'));
  for (const s of subs.items) subsSection.append(subscriptionCard(s, load));
  const paymentsHolder = h(
    'section',
    { id: 'payments', 'aria-labelledby': 'payments-heading', 'aria-busy': 'true' },
    paymentsHeading(),
    h('p', { class: 'loading' }, 'Loading your payments…'),
  );
  const walletsHolder = h(
    'section',
    { id: 'wallets', 'aria-labelledby': 'wallets-heading', 'aria-busy': 'true' },
    walletsHeading(),
    h('p', { class: 'loading' }, 'Loading your wallets…'),
  );
  setMain(h('h1', {}, 'Your subscriptions'), h('p', { id: 'notice', class: 'notice', tabindex: -1 }, ...notice), subsSection, paymentsHolder, walletsHolder);
  // What an earlier drawing followed is not on this one (until its payments are here).
  watch([], new Map(), []);
  // Usually there already: in place before the page is painted.
  if (early) showPayments(paymentsHolder, early, subs.items);
  else void payments.then((r) => showPayments(paymentsHolder, r, subs.items));
  walletsShown = showWallets(walletsHolder, wallets, subs.items);
  return subs.items;
}

/** Follows the open payments shown on the cards, as the checkout page follows its own, and the newest ended one of each. */
function watch(subs: Sub[], open: Map<string, Pay>, payments: Pay[]): void {
  watched = new Map();
  const now = Date.now();
  for (const s of subs) {
    if (TERMINAL.has(s.status)) continue;
    // A first payment paid and not applied yet is followed until it is (the card then turns active).
    const p = open.get(s.id) ?? paidFirst(payments, s);
    if (p) watched.set(p.id, followOpen(s));
    // The list is newest first: its newest payment, if that one expired (one paid since settles it).
    const ended = payments.find((e) => e.subscription_id === s.id && e.status !== 'pending');
    const endedAt = ended ? (ended.expires_at ?? ended.created_at) * 1000 : 0;
    // One withdrawn for the payment that paid in its place has nothing more to tell.
    if (ended?.status === 'expired' && !ended.replaced_by && endedAt + LATE_FOLLOW_MS > now) watched.set(ended.id, followEnded(s, endedAt));
  }
  schedulePoll();
}

/** A round under way: the page becoming visible again must not start a second one beside it. */
let polling = false;

function schedulePoll(): void {
  window.clearTimeout(pollTimer);
  pollTimer = undefined;
  if (!polling && watched.size && document.visibilityState === 'visible') pollTimer = window.setTimeout(() => void poll(), LOOK_EVERY_MS);
}

async function poll(): Promise<void> {
  const snapshot = watched;
  polling = true;
  try {
    for (const [id, f] of snapshot) {
      const now = Date.now();
      if (f.endedAt !== undefined && now > f.endedAt + LATE_FOLLOW_MS) snapshot.delete(id);
      if (f.nextAt > now || !snapshot.has(id)) continue;
      let s: PaymentStatus;
      try {
        s = await api<PaymentStatus>('GET', `/public/payment/${encodeURIComponent(id)}/status`);
      } catch {
        continue; // asked again on the next round
      }
      if (snapshot !== watched) break;
      if (f.endedAt !== undefined && s.status !== 'paid') {
        f.nextAt = Date.now() + latePace(f.endedAt, Date.now());
        continue;
      }
      // Paid late: followed as an open one from now on, until it is applied.
      delete f.endedAt;
      const next = nextAsk(s, f.paidSeen, Date.now());
      if (next.paidSeen !== null && f.paidSeen === null) received(f.sub);
      f.paidSeen = next.paidSeen;
      if (next.askIn !== null) {
        f.nextAt = Date.now() + next.askIn;
        continue;
      }
      snapshot.delete(id);
      const shown = await refreshCard(f.sub, id, s);
      if (snapshot !== watched) break;
      // Ran out (and nothing else was paid meanwhile): followed on, in case it is paid late; in place of an
      // earlier one of its card, so that a tab left open through a renewal's hourly invoices asks about one.
      if (shown && s.status === 'expired' && !shown.paidMeanwhile) {
        for (const [other, g] of snapshot) if (g.endedAt !== undefined && g.sub.id === shown.sub.id) snapshot.delete(other);
        snapshot.set(id, followEnded(shown.sub, Date.now()));
      }
    }
  } finally {
    polling = false;
  }
  // The next round follows what is watched now (a reload in the meantime replaced the snapshot).
  schedulePoll();
}

const APPLYING = 'Payment received. Applying it to your subscription…';

/** Paid, being applied: nothing is left to pay on its card, which says so until the card is drawn anew. */
function received(sub: Sub): void {
  const card = document.getElementById(`sub-${sub.id}`);
  if (!card || !showReceived(card, sub)) return;
  // A live region inserted with its words is often not read: said once here.
  announce(APPLYING);
}

/** The card's payment section says the payment is received (in place of what paid it); false when it has none. */
function showReceived(card: HTMLElement, sub: Sub): boolean {
  const section = card.querySelector<HTMLElement>('.open-payment');
  if (!section) return false;
  const hadFocus = section.contains(document.activeElement);
  const heading = h('h4', { tabindex: -1 }, 'Payment received');
  section.setAttribute('aria-label', `Payment received for ${sub.plan_name}`);
  section.replaceChildren(heading, h('p', { class: 'status' }, APPLYING));
  if (hadFocus) heading.focus();
  return true;
}

const sleep = (ms: number) => new Promise((r) => window.setTimeout(r, ms));

/** What refreshCard said last, and when: the same words again within NEWS_ONCE_MS are one piece of news. */
let lastNews: { text: string; at: number } | null = null;
const NEWS_ONCE_MS = 30_000;

/** Counts the drawings of the payments list: a list asked for before a newer drawing is not drawn over it. */
let paymentsDrawn = 0;
function drawPayments(items: Pay[]): void {
  paymentsDrawn++;
  document.getElementById('payments')?.replaceWith(paymentsSection(items, sellers));
}

/**
 * Redraws one subscription's card and the payments after its open payment was paid (or expired),
 * without reloading the page (a half-filled form elsewhere stays). Billing applies a payment from its
 * event a moment after the payment itself is settled: asked again until the subscription shows it.
 */
async function refreshCard(before: Sub, paymentId: string, settled: PaymentStatus): Promise<{ sub: Sub; paidMeanwhile: boolean } | null> {
  const status = settled.status;
  let subs: Page<Sub> | undefined;
  let payments: Page<Pay> | undefined;
  for (let attempt = 0; attempt < 10; attempt++) {
    try {
      [subs, payments] = await subscriptionsAndPayments();
    } catch {
      await sleep(1000);
      continue;
    }
    const now = subs.items.find((s) => s.id === before.id);
    const moved = !now || now.status !== before.status || now.current_period_end !== before.current_period_end;
    if (status !== 'paid' || settled.unapplied || moved) break;
    await sleep(1000);
  }
  if (!subs || !payments) return null;
  const sub = subs.items.find((s) => s.id === before.id);
  const old = document.getElementById(`sub-${before.id}`);
  if (!sub || !old) return null;
  const open = openPayments(payments.items);
  const card = subscriptionCard(sub, load);
  showOpenPayment(card, sub, open.get(sub.id), paidFirst(payments.items, sub));
  // Paid and not applied yet (billing away for minutes): not "ran out, get a fresh invoice" beside it
  // (found in review: an invitation to pay twice).
  const applying = status === 'paid' && !settled.unapplied && settled.applied === false;
  if (applying) showReceived(card, sub);
  // What the card said after an action (a switch saved, a cancel that failed) stays said on the new card.
  for (const line of card.querySelectorAll<HTMLElement>('[role=status][id]')) {
    const said = old.querySelector<HTMLElement>(`[id="${line.id}"]`);
    if (said) line.replaceChildren(...said.childNodes);
  }
  const hadFocus = old.contains(document.activeElement);
  old.replaceWith(card);
  sellers = sellersOf(subs.items);
  drawPayments(payments.items);
  if (hadFocus) card.querySelector<HTMLElement>('h3')?.focus();
  const next = open.get(sub.id);
  if (next && next.id !== paymentId && !TERMINAL.has(sub.status)) watched.set(next.id, followOpen(sub));
  const plan = theirs(sub.plan_name || 'your subscription');
  // Ended unpaid because another payment of it was paid meanwhile (one that ran out, paid late: the
  // service then withdraws the fresh one): not "nothing was charged" beside a card that turned active.
  const mine = payments.items.find((p) => p.id === paymentId);
  const paidMeanwhile =
    status !== 'paid' &&
    payments.items.some((p) => p.subscription_id === sub.id && p.status === 'paid' && p.id !== paymentId && (p.paid_at ?? 0) >= (mine?.created_at ?? Infinity));
  const said =
    status !== 'paid' && !paidMeanwhile
      ? ['The payment due for ', plan, ` ${status === 'expired' ? 'expired' : 'failed'} before it was paid. Nothing was charged.`]
      : settled.unapplied
        ? ['Your payment for ', plan, ' arrived too late to be applied. The seller is told to refund it; please contact them.']
        : settled.applied === false
          ? ['Payment received for ', plan, '. Applying it is taking longer than usual; reload this page later to see the result.']
          : ['Payment received for ', plan, `. Status: ${STATUS_LABELS[sub.status] ?? sub.status}.`];
  const text = said.map((c) => (typeof c === 'string' ? c : c.textContent)).join('');
  // The same news from two of its payments within moments (the fresh one withdrawn, the late one paid) is said once.
  if (lastNews?.text === text && Date.now() - lastNews.at < NEWS_ONCE_MS) return { sub, paidMeanwhile };
  lastNews = { text, at: Date.now() };
  addNews(sub.id, said);
  announce(text);
  return { sub, paidMeanwhile };
}

// A hidden page asks nothing; it catches up when it is shown again, and stops for good when left.
document.addEventListener('visibilitychange', schedulePoll);
window.addEventListener('pagehide', () => window.clearTimeout(pollTimer));
window.addEventListener('pageshow', (e) => {
  if (e.persisted) schedulePoll();
});

/** The page's own title (manage.html), for a load after an outage that changed it. */
const PAGE_TITLE = document.title;

/** `tries`: loads that met an outage before this one (then it loads again by itself, see loadAgainLater). */
async function main(tries = 0): Promise<void> {
  if (!/^[0-9a-f]{16,128}$/i.test(token)) return badLink();
  try {
    await load();
    if (tries) {
      // Found from outside: the tab kept "Subscriptions unavailable".
      document.title = PAGE_TITLE;
      loadedAgain('Your subscriptions are loaded.');
    }
  } catch (err) {
    // A token of the wrong shape (a 401 was made the bad-link view by portal()).
    if (err instanceof ApiError && err.status === 422) return badLink();
    if (!stillUnavailable(err)) {
      document.title = 'Subscriptions unavailable';
      const heading = h('h1', { tabindex: -1 }, 'Your subscriptions could not be loaded');
      setMain(heading, h('p', { role: 'alert' }, err instanceof ApiError ? err.message : 'Something went wrong.'), tryAgain(err));
      // As the checkout's: the focus on what is there, not left on <body> (or on a view that is gone).
      heading.focus();
    }
    if (passing(err)) loadAgainLater(tries, () => void main(tries + 1));
  }
}

void main();
