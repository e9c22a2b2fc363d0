import { ALREADY_SUBSCRIBED, CONTACTS_UNCHANGED, NO_PLAN_NAMED, PLAN_NOT_FOUND, PLAN_NOT_OFFERED } from '@sb/contracts/page-words';
import {
  announce,
  api,
  ApiError,
  date,
  fiat,
  fieldMessage,
  h,
  INTERVALS,
  loadAgainLater,
  loadedAgain,
  stillUnavailable,
  tryAgain,
  METHOD_LABELS,
  naming,
  passing,
  nwcShapeError,
  paymentView,
  randomKey,
  sats,
  sentence,
  setBusy,
  setMain,
  theirs,
  type Payable,
  unconfirmed,
  noAnswer,
  stillInProgress,
  EARLIER_TRY,
} from './common.js';
import { LATE_FOLLOW_MS, LATE_POLL_MS, latePace, nextAsk, POLL_MS, type PaymentStatus } from './pace.js';

interface PublicPlan {
  id: string;
  name: string;
  description?: string | null;
  amount_sats: number;
  interval: string;
  trial_days: number;
  payment_methods: string[];
  available_contact_methods?: string[];
  messenger_bot?: string;
  merchant_name?: string;
  fiat_price?: { amount: number; currency: string };
}

interface Checkout extends Payable {
  payment_id: string;
  subscription_id?: string | null;
  manage_url?: string | null;
  /** A returning subscriber's: the other contact details given were not stored. */
  contacts_unchanged?: boolean;
}

interface Trial {
  subscription_id: string;
  trial: true;
  trial_end?: number;
  message: string;
  manage_url?: string | null;
}

interface NwcAnswer {
  subscription_id: string;
  status: 'active' | 'pending';
  message: string;
  error_code?: string | null;
  manage_url?: string | null;
  /** No answer in time: the wallet may still pay (no advice to pay another way). */
  may_still_pay?: boolean;
}

/** The keys that open a select's list or move through its options (type-ahead letters aside). */
const PICKING_KEYS = new Set(['ArrowUp', 'ArrowDown', 'ArrowLeft', 'ArrowRight', 'Home', 'End', 'PageUp', 'PageDown', 'Enter', ' ', 'F4']);

const WAITING = 'Waiting for your payment…';
const planId = decodeURIComponent(location.pathname.replace(/\/+$/, '').split('/').pop() ?? '');

/** The messenger field's hint around the seller's bot, which is named (a link) once the plan names it. */
const MESSENGER_HINT = ['Enter your username (like @alice) or numeric chat id, and press Start on ', ' in Telegram: messages reach you from then on.'] as const;

const CONTACT_FIELDS: Record<string, { label: string; type: string; autocomplete: string; hint: string }> = {
  email: { label: 'E-mail', type: 'email', autocomplete: 'email', hint: 'For receipts, reminders and your link to manage the subscription.' },
  // The bot can only write to a chat the person opened with it: pressing Start links their username to it.
  messenger: {
    label: 'Telegram username',
    type: 'text',
    autocomplete: 'off',
    hint: `${MESSENGER_HINT[0]}the seller's bot${MESSENGER_HINT[1]}`,
  },
  nostr: { label: 'Nostr address (npub or name@domain)', type: 'text', autocomplete: 'off', hint: 'For reminders and receipts as Nostr direct messages.' },
};

/** A field's label inside a sentence: "e-mail", but Telegram and Nostr keep their capital (found from outside). */
const inSentence = (label: string): string => (/^(Telegram|Nostr)\b/.test(label) ? label : label.toLowerCase());

const CONTACT_NAMES: Record<string, string> = { email: 'E-mail', messenger: 'Telegram', nostr: 'Nostr' };

/** The form field the API means by a field name in a 422 answer. */
const FIELD_IDS: Record<string, string> = {
  email: 'contact-email',
  messenger: 'contact-messenger',
  nostr: 'contact-nostr',
  contact_preference: 'contact-preference',
  nwc_connection_string: 'nwc',
  nwc_string: 'nwc',
};

let pollTimer: number | undefined;
/** Which following is current: an answer to an earlier one (a request under way when the view changed) is dropped. */
let following = 0;

/** Stops following a payment: its timer, and a status request under way. */
function stopFollowing(): void {
  window.clearTimeout(pollTimer);
  following++;
}

/**
 * What this tab keeps (sessionStorage: gone with the tab; a duplicated or restored tab keeps a copy),
 * per payment: the checkout it showed, so that a reload or Back shows the same invoice, and the portal
 * link its answer carried, shown once it is paid. A link is kept for 30 minutes, and forgotten when its
 * result is left by Back or Forward (the next person at this tab must not find it there). A retry of the
 * same contact is answered without a link (knowing someone's address must not hand out their portal): a
 * fresh invoice, or a checkout on another method replacing this tab's, carries over the link of the
 * payment it replaces.
 */
const LINK_KEPT_MS = 30 * 60_000;
function tabGet<T>(key: string): T | null {
  try {
    return JSON.parse(sessionStorage.getItem(key) ?? 'null') as T | null;
  } catch {
    // Storage off (a policy, private mode) or garbled: nothing kept.
    return null;
  }
}
function forgetDraft(planId: string): void {
  try {
    sessionStorage.removeItem(draftKey(planId));
  } catch {
    // Storage off: nothing was kept.
  }
}
function tabSet(key: string, value: unknown): void {
  try {
    sessionStorage.setItem(key, JSON.stringify(value));
  } catch {
    // Not kept: the page still shows it while it is open.
  }
}
function linkOf(paymentId: string): string | null {
  const kept = tabGet<{ url: string; at: number }>(`sb-link-${paymentId}`);
  return kept && typeof kept.url === 'string' && Date.now() - kept.at < LINK_KEPT_MS ? kept.url : null;
}
/**
 * Keeps a new checkout's link for its payment. An answer without one (the contact was known) keeps the link
 * of the payment it replaces, if any, as old as it was (30 minutes from when it was given).
 */
function keepLink(r: { payment_id: string; manage_url?: string | null }, replacedPaymentId: string | null): void {
  const kept = r.manage_url
    ? { url: r.manage_url, at: Date.now() }
    : replacedPaymentId && linkOf(replacedPaymentId)
      ? tabGet<{ url: string; at: number }>(`sb-link-${replacedPaymentId}`)
      : null;
  if (kept) tabSet(`sb-link-${r.payment_id}`, kept);
}
/** The storage keys whose link the result on screen shows, and that link: forgotten when it is left. */
let shownLinkKeys: string[] = [];
let shownLink: string | null = null;
function forgetShownLinks(): void {
  try {
    // Every copy of it: those kept for the payments it replaced as well.
    const copies: string[] = [];
    for (let i = 0; i < sessionStorage.length; i++) {
      const key = sessionStorage.key(i);
      if (shownLink && key?.startsWith('sb-link-') && tabGet<{ url: string }>(key)?.url === shownLink) copies.push(key);
    }
    for (const key of [...shownLinkKeys, ...copies]) sessionStorage.removeItem(key);
  } catch {
    // Storage off: nothing was kept.
  }
  shownLinkKeys = [];
  shownLink = null;
}

/**
 * The checkout a payment view shows; `paid` once this tab saw it paid (`late`: too late to be applied);
 * `replaced`: the payments of the same checkout it replaced (fresh invoices), followed with it.
 */
interface ShownPayment {
  c: Checkout;
  body: Record<string, unknown>;
  method: string;
  paid?: boolean | undefined;
  late?: boolean;
  replaced?: string[];
}
const shownPayment = (paymentId: string): ShownPayment | null => tabGet<ShownPayment>(`sb-payment-${paymentId}`);
/**
 * Notes that a payment this tab showed is paid: a 409 for its contact then says so, not "open checkout";
 * a reload says it as it was said (found in review: a late one was first drawn as an invoice to pay).
 */
function keepPaid(paymentId: string, late: boolean): void {
  const kept = shownPayment(paymentId);
  if (kept) tabSet(`sb-payment-${paymentId}`, { ...kept, paid: true, late } satisfies ShownPayment);
}

/** The newest checkout this tab showed for the plan and the contact given in `body` (its payment may have expired since). */
function openCheckoutOf(body: Record<string, unknown>): ShownPayment | null {
  let found: ShownPayment | null = null;
  try {
    for (let i = 0; i < sessionStorage.length; i++) {
      const key = sessionStorage.key(i);
      const kept = key?.startsWith('sb-payment-') ? tabGet<ShownPayment>(key) : null;
      // One paid too late started nothing: not "already subscribed in this tab".
      if (!kept?.c?.payment_id || kept.body?.plan_id !== body.plan_id || kept.late) continue;
      if (!Object.keys(CONTACT_FIELDS).some((c) => body[c] && kept.body[c] === body[c])) continue;
      if (!found || (kept.c.expires_at ?? 0) > (found.c.expires_at ?? 0)) found = kept;
    }
  } catch {
    // Storage off: nothing kept.
  }
  return found;
}

/** A subscription that started without a payment view (a trial, a wallet that paid): its result, for a reload. */
/**
 * What the form held when it was last sent in this tab, filled in again after Back from the payment
 * (found from outside: Back cleared the e-mail). Never the wallet string (a secret). Only on the way
 * back (Back, Forward), for LINK_KEPT_MS, and forgotten once the checkout is done or can go no further,
 * so the next person at this tab who opens the link finds an empty form.
 */
interface Draft {
  at: number;
  method: string;
  contacts: Record<string, string>;
  pref?: string | undefined;
  reminders: boolean;
}
const draftKey = (planId: string) => `sb-form-${planId}`;
/**
 * The form's last request that got no answer (lost on the way back, or the service too slow), with its
 * Idempotency-Key: sent again unchanged, it is a retry, and the service answers it with the checkout the
 * first one made, its portal link included (found from outside: a retry got the checkout without its
 * link, and the page said the link "was shown when you first subscribed").
 */
let unanswered: { sent: string; key: string; at: number } | null = null;
/**
 * For how long a request without an answer is retried as the same one. Not longer: the next person at
 * this tab who sends the same form would get the first one's answer, its link included; nor after Back
 * or Forward (forgotten there), for the same reason.
 */
const UNANSWERED_MS = 5 * 60_000;
function idempotencyKey(sent: string): string {
  if (unanswered?.sent !== sent || Date.now() - unanswered.at > UNANSWERED_MS) {
    unanswered = { sent, key: randomKey(), at: Date.now() };
  }
  return unanswered.key;
}
/**
 * The portal link a wallet's refusal carried, for a retry with another wallet on this page (found from
 * outside: lost). Not kept in the tab, and forgotten on Back or Forward: the next person at the tab
 * retrying with the first one's address must not be shown it.
 */
let refusedLink: { subscription: string; url: string } | null = null;
/** No answer to go by (the connection, a timeout, a service away): the same request again is a retry. */

/** The page itself was loaded by Back or Forward. */
const loadedBack = (performance.getEntriesByType?.('navigation')[0] as PerformanceNavigationTiming | undefined)?.type === 'back_forward';
/** Counts the views `main` was asked for: an answer for an earlier one (a second quick Back) is stale. */
let views = 0;
/**
 * Whether the view is still the one of when this was called: an answer that comes after Back or Forward
 * drew another is not drawn over it (found in review: a slow checkout's answer replaced the form).
 */
const currentView = (): (() => boolean) => {
  const view = views;
  return () => view === views;
};

interface Subscribed {
  message: string;
  link: string | null;
  at: number;
  /** Not 'You are subscribed' (a payment not applied yet). */
  heading?: string;
}

function portalLinkParagraph(url: string | null): HTMLElement | null {
  return url
    ? h(
        'p',
        {},
        h('a', { class: 'button', href: url, id: 'portal-link' }, 'Manage your subscription'),
        h('span', { class: 'hint block' }, 'Keep this link: it is your key to your subscriptions, payments and receipts.'),
      )
    : null;
}

/** The methods priced in fiat, as the fiat hint names them. */
function fiatRails(methods: string[]): string {
  return [methods.includes('cardproc') && 'card', methods.includes('walletproc') && 'online wallet (PayPal)'].filter(Boolean).join(' or ');
}

function priceLine(plan: PublicPlan): string {
  return `${sats(plan.amount_sats)} per ${INTERVALS[plan.interval] ?? plan.interval}`;
}

/** Who sells it, when the seller set a name: a person should know whom they pay. */
const sellerLine = (plan: PublicPlan) => (plan.merchant_name ? h('p', { class: 'seller', id: 'seller' }, 'by ', theirs(plan.merchant_name)) : null);

/** The tab's title: the step, the plan and its seller (found from outside: "Subscribe" on every view but the form). */
function titled(step: string, plan: PublicPlan): void {
  document.title = `${step} ${plan.name}${plan.merchant_name ? ` by ${plan.merchant_name}` : ''}`;
}

function planHeader(plan: PublicPlan, eyebrow = 'Subscribe to'): HTMLElement {
  titled('Subscribe to', plan);
  return h(
    'header',
    { class: 'plan' },
    h('p', { class: 'eyebrow' }, eyebrow),
    h('h1', { dir: 'auto' }, plan.name),
    sellerLine(plan),
    h('p', { class: 'price' }, priceLine(plan)),
  );
}

const paidMessage = (plan: PublicPlan) => `Payment received: your subscription to ${plan.name} is active.`;

function field(id: string, label: string, input: HTMLElement, hint?: string): HTMLElement {
  if (hint) input.setAttribute('aria-describedby', `${id}-hint ${id}-error`);
  else input.setAttribute('aria-describedby', `${id}-error`);
  return h(
    'div',
    { class: 'field' },
    h('label', { for: id }, label),
    hint ? h('p', { class: 'hint', id: `${id}-hint` }, hint) : null,
    input,
    h('p', { class: 'field-error', id: `${id}-error` }),
  );
}

function fieldError(id: string, text: string | null): void {
  const el = document.getElementById(`${id}-error`);
  const input = document.getElementById(id);
  if (el) el.textContent = text ?? '';
  if (input) {
    if (text) input.setAttribute('aria-invalid', 'true');
    else input.removeAttribute('aria-invalid');
  }
}

/** A pointer is pressed on the submit button (see the connection string's blur check). */
let pressingSubmit = false;

/**
 * `back`: reached by Back or Forward, where what was typed is filled in again. `note`: said above the
 * form (why the form is shown where the address named something else).
 */
function render(plan: PublicPlan, back: boolean, note?: string): void {
  titled('Subscribe to', plan);
  const trial = plan.trial_days > 0;
  const methods = plan.payment_methods;
  const contacts = (plan.available_contact_methods?.length ? plan.available_contact_methods : ['email']).filter((c) => CONTACT_FIELDS[c]);

  const methodRadios = methods.map((m, i) =>
    h(
      'div',
      { class: 'choice' },
      h('input', { type: 'radio', name: 'method', id: `method-${m}`, value: m, checked: i === 0, onchange: () => syncMethod() }),
      h('label', { for: `method-${m}` }, METHOD_LABELS[m] ?? m),
    ),
  );
  const nwcInput = h('textarea', { id: 'nwc', name: 'nwc', rows: 3, spellcheck: 'false', autocomplete: 'off', class: 'mono' });
  nwcInput.addEventListener('blur', (ev) => {
    // Not when the press that took the focus is on the submit button: the message would push the button
    // down under the pointer, the release would miss it and the first press do nothing (found from
    // outside). The submit's own check says it, with the alert and the focus on the field.
    if (pressingSubmit || (ev as FocusEvent).relatedTarget === submit) return;
    if (nwcInput.value.trim()) fieldError('nwc', nwcShapeError(nwcInput.value));
  });
  const nwcBlock = h(
    'div',
    { id: 'nwc-block', hidden: true },
    field(
      'nwc',
      'Wallet connection string',
      nwcInput,
      'From your wallet\'s "Nostr Wallet Connect" settings; starts with nostr+walletconnect://. Your wallet pays each renewal by itself.',
    ),
  );

  // The person picked the preference themselves (or their draft had one): typing no longer moves it.
  let prefChosen = false;
  const contactFields = contacts.map((c) => {
    const f = CONTACT_FIELDS[c]!;
    const input = h('input', { id: `contact-${c}`, name: c, type: f.type, autocomplete: f.autocomplete, required: contacts.length === 1 });
    // Filling a contact while the preferred one is empty makes it the preferred one, unless the person chose
    // (found from outside: a Nostr preference picked first became Telegram, silently, as the chat id was typed).
    input.addEventListener('input', () => {
      if (prefChosen) return;
      const chosen = document.getElementById(`contact-${prefSelect.value}`) as HTMLInputElement | null;
      if (input.value.trim() && !chosen?.value.trim()) prefSelect.value = c;
    });
    // No channel set up here: nothing promises our messages (the seller may write through webhooks).
    const silent = c === 'email' && !plan.available_contact_methods?.length;
    const el = field(
      `contact-${c}`,
      f.label,
      input,
      silent ? 'So the seller can reach you. Keep the link shown once you have subscribed: it manages your subscription.' : f.hint,
    );
    if (c === 'messenger' && plan.messenger_bot) {
      // The seller's bot by name, with the link that opens it in Telegram.
      const bot = plan.messenger_bot;
      el.querySelector('.hint')?.replaceChildren(
        MESSENGER_HINT[0],
        h('a', { href: `https://t.me/${encodeURIComponent(bot)}`, rel: 'noopener' }, `@${bot}`),
        MESSENGER_HINT[1],
      );
    }
    return el;
  });
  const prefSelect = h(
    'select',
    { id: 'contact-preference', name: 'contact_preference' },
    ...contacts.map((c) => h('option', { value: c }, CONTACT_NAMES[c] ?? c)),
  ) as HTMLSelectElement;
  // Opening the list or choosing in it with a key is a pick, also of the option already shown, which fires no
  // `change` (found from outside: that one then followed the typing).
  const picked = (): void => {
    prefChosen = true;
  };
  prefSelect.addEventListener('change', picked);
  prefSelect.addEventListener('pointerdown', picked);
  // Only keys that move through the options or open the list: not Tab, a screen reader's command keys
  // (Insert, CapsLock), Escape, nor a shortcut (found in review: each counted as a pick).
  prefSelect.addEventListener('keydown', (ev) => {
    if (ev.ctrlKey || ev.metaKey) return;
    if (PICKING_KEYS.has(ev.key) || (ev.key.length === 1 && !ev.altKey)) picked();
  });

  const submit = h('button', { type: 'submit', id: 'submit' }, trial ? 'Start free trial' : 'Continue to payment');
  submit.addEventListener('pointerdown', () => {
    pressingSubmit = true;
    // Up or cancelled (a touch that turns into a scroll), anywhere: the press is over.
    const over = () => {
      removeEventListener('pointerup', over);
      removeEventListener('pointercancel', over);
      setTimeout(() => (pressingSubmit = false));
    };
    addEventListener('pointerup', over);
    addEventListener('pointercancel', over);
  });
  const formError = h('p', { id: 'form-error', class: 'error', role: 'alert' });
  const form = h(
    'form',
    { id: 'checkout-form', novalidate: true },
    h('fieldset', {}, h('legend', {}, trial ? 'How will you pay after the trial?' : 'How would you like to pay?'), ...methodRadios),
    nwcBlock,
    h(
      'fieldset',
      {},
      h('legend', {}, contacts.length > 1 ? 'Your contact details (at least one)' : 'Your contact details'),
      ...contactFields,
      contacts.length > 1 ? field('contact-preference', 'Send reminders and receipts by', prefSelect) : null,
      // A seller with no channel sends no reminder: nothing to promise (found from outside). Unknown (the
      // channels could not be read) is offered, as the service may well send them.
      plan.available_contact_methods?.length === 0
        ? null
        : h(
            'div',
            { class: 'choice' },
            h('input', { type: 'checkbox', id: 'reminders', name: 'reminders', checked: true }),
            h('label', { for: 'reminders' }, 'Remind me before each renewal'),
          ),
    ),
    formError,
    submit,
  );

  function method(): string {
    return (form.querySelector('input[name=method]:checked') as HTMLInputElement | null)?.value ?? methods[0] ?? '';
  }
  function syncMethod(): void {
    const nwc = method() === 'nwc';
    nwcBlock.hidden = !nwc;
    submit.textContent = trial ? 'Start free trial' : nwc ? 'Subscribe and let my wallet pay' : 'Continue to payment';
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    void onSubmit();
  });

  async function onSubmit(): Promise<void> {
    formError.textContent = '';
    const m = method();
    const body: Record<string, unknown> = {
      plan_id: plan.id,
      receive_reminders: (document.getElementById('reminders') as HTMLInputElement | null)?.checked ?? true,
    };
    let bad = false;
    const pref = contacts.length > 1 ? prefSelect.value : undefined;
    const typed = Object.fromEntries(contacts.map((c) => [c, (document.getElementById(`contact-${c}`) as HTMLInputElement).value]));
    tabSet(draftKey(plan.id), { at: Date.now(), method: m, contacts: typed, pref, reminders: body.receive_reminders === true } satisfies Draft);
    const given = contacts.filter((c) => typed[c]!.trim());
    for (const c of contacts) {
      const input = document.getElementById(`contact-${c}`) as HTMLInputElement;
      // A Nostr key as many apps copy it, a NIP-21 link (`nostr:npub1…`): the key itself is sent (found from outside: refused).
      const v = c === 'nostr' ? input.value.trim().replace(/^nostr:/i, '') : input.value.trim();
      let err: string | null = null;
      if (!v && input.required) err = `Enter your ${inSentence(CONTACT_FIELDS[c]!.label)}.`;
      else if (!v && c === pref)
        err = given.length ? `Enter your ${inSentence(CONTACT_FIELDS[c]!.label)}, or choose another way below.` : 'Enter at least one way to reach you.';
      else if (v && c === 'email' && !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(v)) err = 'Enter an e-mail address like name@example.com.';
      fieldError(`contact-${c}`, err);
      if (err) bad = true;
      if (v) body[c] = v;
    }
    if (pref) body.contact_preference = pref;
    if (m === 'nwc') {
      const err = nwcShapeError(nwcInput.value);
      fieldError('nwc', err);
      if (err) bad = true;
    }
    if (bad) {
      formError.textContent = 'Please correct the marked fields.';
      (form.querySelector('[aria-invalid=true]') as HTMLElement | null)?.focus();
      return;
    }
    setBusy(submit, true);
    form.setAttribute('aria-busy', 'true');
    // The wallet was asked to pay: an answer that never came may hide a payment.
    let walletAsked = false;
    const still = currentView();
    try {
      if (m === 'nwc') {
        submit.textContent = 'Checking your wallet…';
        announce('Checking your wallet connection');
        const check = await api<{ valid: boolean; error?: string | null }>('POST', '/public/nwc/validate', { body: { nwc_string: nwcInput.value.trim() } });
        if (!still()) return;
        if (!check.valid) {
          // Why, under the field (read with it when it takes the focus); the alert says what to do next
          // rather than the same words again (found from outside).
          fieldError('nwc', check.error ? sentence(check.error) : 'This wallet connection cannot be used.');
          formError.textContent = 'Your wallet could not be used. Paste another connection string, or choose another way to pay.';
          nwcInput.focus();
          return;
        }
        submit.textContent = 'Your wallet is paying…';
        walletAsked = true;
        // The route waits up to 75 s for the wallet to pay.
        const sent = { ...body, nwc_connection_string: nwcInput.value.trim() };
        const r = await api<NwcAnswer>('POST', '/public/subscribe/nwc', {
          body: sent,
          waitMs: 90_000,
          idempotencyKey: idempotencyKey(`nwc ${JSON.stringify(sent)}`),
        });
        unanswered = null;
        // A wallet that could not pay leaves the subscription waiting, and its answer carries the link; a
        // second wallet's answer for the same contact does not (found from outside: "was shown when you first
        // subscribed" in the tab that had just shown it).
        if (r.manage_url) refusedLink = { subscription: r.subscription_id, url: r.manage_url };
        const link = r.manage_url ?? (refusedLink?.subscription === r.subscription_id ? refusedLink.url : null);
        // A subscription made is said even after Back or Forward drew another view: its portal link is
        // given once (found in review: dropped with the answer).
        if (r.status === 'active') return subscribed(plan, r.subscription_id, r.message, link, undefined, !still());
        // Paid, without an error: active in a moment (billing applies the payment), or ended meanwhile (the
        // owner cancelled it): the words say which, the heading claims no more than the payment.
        if (!r.error_code) return subscribed(plan, r.subscription_id, r.message, link, 'Your wallet has paid', !still());
        // The subscription exists now, waiting for its first payment: this contact cannot start another,
        // so the way on is another wallet here, or its own page, where it is payable by invoice.
        const code = r.error_code && !r.message.includes(r.error_code) ? ` (${r.error_code})` : '';
        // A wallet that did not answer in time may still pay: no advice to pay another way meanwhile
        // (found from outside: "try again with another wallet", then the late payment made it active).
        const said = r.may_still_pay
          ? [r.message, ...(link ? [' ', h('a', { href: link, id: 'portal-link' }, 'The page of your subscription'), ' shows it.'] : [])]
          : [
              `${r.message}${code}. You can try again with another wallet`,
              ...(link ? [', or pay another way on ', h('a', { href: link, id: 'portal-link' }, 'the page of your subscription'), '.'] : ['.']),
            ];
        if (still()) return formError.replaceChildren(...said);
        // Back or Forward drew another view meanwhile: written into the form if that is what is shown
        // (what was typed since stays), else the form again, in an entry of its own, with this answer,
        // whose link comes once (found in review: written into the form no longer shown).
        const shownError = document.querySelector('#checkout-form #form-error');
        if (shownError) return shownError.replaceChildren(...said);
        history.pushState(null, '', location.pathname);
        // What that view followed or waited for is not drawn over this one.
        stopFollowing();
        views++;
        render(plan, true);
        document.getElementById('form-error')?.replaceChildren(...said);
        document.getElementById('nwc')?.focus();
        return;
      }
      submit.textContent = 'Creating your payment…';
      announce('Creating your payment');
      // This tab's own checkout for the same e-mail (the service knows a contact by it), which a checkout
      // on another method replaces: its answer carries no link (the contact is known), the one this tab
      // was given stays this person's.
      const earlier = openCheckoutOf(body);
      const email = (v: unknown) => (typeof v === 'string' ? v.toLowerCase() : null);
      const replaced = earlier && email(body.email) && email(earlier.body.email) === email(body.email) ? earlier : null;
      const sent = { ...body, payment_method: m };
      const r = await api<Checkout | Trial>('POST', '/public/subscribe', { body: sent, idempotencyKey: idempotencyKey(JSON.stringify(sent)) });
      unanswered = null;
      // The page's own words for the trial: its end as every date here reads, and what comes after it.
      // Said even after Back or Forward, as a wallet's subscription is.
      if ('trial' in r) {
        const message = r.trial_end ? `Your free trial of ${plan.name} has started. It ends on ${date(r.trial_end)}; after it, ${priceLine(plan)}.` : r.message;
        return subscribed(plan, r.subscription_id, message, r.manage_url ?? null, undefined, !still());
      }
      keepLink(r, replaced?.c.payment_id ?? null);
      // Back or Forward drew another view meanwhile: not drawn over it, but kept, so that sending the form
      // again offers this tab's open checkout (with its link) rather than a bare 409.
      if (!still()) return tabSet(`sb-payment-${r.payment_id}`, { c: { ...r, manage_url: null }, body, method: m } satisfies ShownPayment);
      // In the address, so that a reload or Back comes back to this payment, not to an empty form.
      history.pushState(null, '', `${location.pathname}?payment=${encodeURIComponent(r.payment_id)}`);
      showPayment(plan, r, body, m);
    } catch (err) {
      if (!noAnswer(err)) unanswered = null;
      if (!still()) return;
      // Archived (or deleted) while the form was open: nothing on this form can succeed any more.
      if (err instanceof ApiError && err.status === 404) return planUnavailable(err);
      // Problems the service finds with a field are shown at that field, as the page's own checks are.
      const marked = err instanceof ApiError ? err.fields.filter((f) => FIELD_IDS[f.field] && document.getElementById(FIELD_IDS[f.field]!)) : [];
      for (const f of marked) fieldError(FIELD_IDS[f.field]!, fieldMessage(f));
      // The first field the service refused takes the focus, as the page's own checks do.
      if (marked.length) (form.querySelector('[aria-invalid=true]') as HTMLElement | null)?.focus();
      formError.textContent = marked.length
        ? 'Please correct the marked fields.'
        : stillInProgress(err)
          ? EARLIER_TRY
          : walletAsked && unconfirmed(err)
            ? 'We did not hear back in time, and your wallet may have paid already. Check your wallet and your messages before you try again.'
            : err instanceof ApiError
              ? err.message
              : 'Something went wrong. Please try again.';
      if (err instanceof ApiError && err.status === 409 && !marked.length && !noAnswer(err)) conflictHelp(plan, body, formError);
    } finally {
      // Still on the form: its outcome is the form's alert, not what was under way.
      if (form.isConnected) announce('');
      setBusy(submit, false);
      form.removeAttribute('aria-busy');
      syncMethod();
      // The focus lost meanwhile (a view redrawn, a field refused): back where the person acts next.
      if (submit.isConnected && (!document.activeElement || document.activeElement === document.body)) {
        ((form.querySelector('[aria-invalid=true]') as HTMLElement | null) ?? submit).focus();
      }
      // The alert above it grew (a 409's help is several lines): the focused button is brought back into
      // sight with it (found from outside: pushed below the fold of a phone, nothing scrolled).
      if (document.activeElement === submit && formError.textContent) {
        formError.scrollIntoView({ block: 'nearest' });
        submit.scrollIntoView({ block: 'nearest' });
      }
    }
  }

  setMain(
    h(
      'header',
      { class: 'plan' },
      h('p', { class: 'eyebrow' }, 'Subscribe to'),
      h('h1', { dir: 'auto' }, plan.name),
      sellerLine(plan),
      plan.description ? h('p', { class: 'description', dir: 'auto' }, plan.description) : null,
      h('p', { class: 'price', id: 'price' }, priceLine(plan)),
      plan.fiat_price
        ? h(
            'p',
            { class: 'hint', id: 'fiat-price' },
            `About ${fiat(plan.fiat_price.amount, plan.fiat_price.currency)} at today's rate when paid by ${fiatRails(methods)}.`,
          )
        : null,
      trial ? h('p', { class: 'trial' }, `${plan.trial_days}-day free trial: nothing to pay today.`) : null,
    ),
    note ? h('p', { class: 'notice', id: 'form-note' }, note) : null,
    methods.length ? form : h('p', { class: 'error', role: 'alert' }, 'This plan cannot be paid for right now. Please contact the seller.'),
  );
  const kept = tabGet<Draft>(draftKey(plan.id));
  const draft = back && kept && Date.now() - kept.at < LINK_KEPT_MS ? kept : null;
  if (draft) {
    const radio = methodRadios.map((r) => r.querySelector('input') as HTMLInputElement).find((r) => r.value === draft.method);
    if (radio) radio.checked = true;
    for (const c of contacts) {
      const v = draft.contacts?.[c];
      if (typeof v === 'string') (form.querySelector(`#contact-${c}`) as HTMLInputElement).value = v;
    }
    if (draft.pref && contacts.includes(draft.pref)) {
      prefSelect.value = draft.pref;
      prefChosen = true;
    }
    const reminders = form.querySelector('#reminders') as HTMLInputElement | null;
    if (reminders) reminders.checked = draft.reminders !== false;
  }
  syncMethod();
}

/**
 * A 409 at checkout: this contact already has a subscription or a checkout of this plan. This tab's own
 * open checkout is offered again. Otherwise the page cannot know which it is, and must not: the service
 * answers a paid subscription and an unpaid checkout alike (anyone may type someone's address), so the
 * help covers both and never depends on the detail's words. The link itself is never given for an address
 * typed here.
 */
function conflictHelp(plan: PublicPlan, body: Record<string, unknown>, formError: HTMLElement): void {
  const open = openCheckoutOf(body);
  if (open) {
    // Paid is said as paid (found from outside: "open checkout", then "Waiting for your payment" for it).
    const show = h('button', { type: 'button', id: 'show-open-checkout', class: 'secondary' }, open.paid ? 'Show it' : 'Show its payment');
    show.addEventListener('click', () => {
      history.pushState(null, '', `${location.pathname}?payment=${encodeURIComponent(open.c.payment_id)}`);
      if (open.late) paidTooLate(plan);
      else if (open.paid) paidHere(plan, open.c.payment_id);
      else showPayment(plan, open.c, open.body, open.method, true);
    });
    formError.replaceChildren(open.paid ? 'You already subscribed to this plan in this tab: ' : 'You have an open checkout for this plan: ', show);
    return;
  }
  const link = whereTheLinkIs(plan, 'existing');
  // A trial starts at once: there is no unpaid checkout to tell of (found from outside). One started
  // before the seller added the trial is still covered by "subscription".
  formError.textContent =
    plan.trial_days > 0
      ? `This contact already has a subscription to this plan: ${link}.`
      : `This contact already has a subscription or a checkout of this plan. If it was paid, ${link}. If not, pay it where it was started, or wait until it expires (within 24 hours) and start again here.`;
}

/** A checkout that another one of the same contact replaced, or that was paid or cancelled meanwhile. */
function replacedHelp(plan: PublicPlan): string {
  return `Another checkout for this contact took its place (started in another tab or with another payment method), or it was paid or cancelled meanwhile. Nothing more is due here: pay where the newer checkout was started; ${whereTheLinkIs(plan, 'replaced')}.`;
}

/**
 * `restored`: shown again after a reload or Back, so its status is asked at once (it may be paid or gone),
 * and nothing is said of it until that answers: "Waiting for your payment" is no one's news for a paid one.
 * `replaced`: the payments of this checkout it took the place of (fresh invoices): one of them paid late
 * starts the subscription (the service then withdraws this one), so they are followed too (found in
 * review: the page said "expired", then refused a fresh invoice).
 */
function showPayment(plan: PublicPlan, c: Checkout, body: Record<string, unknown>, method: string, restored = false, replacing?: string[]): void {
  stopFollowing();
  // The focused heading says what is shown: "Creating your payment" is over.
  announce('');
  const kept = shownPayment(c.payment_id);
  const replaced = replacing ?? kept?.replaced ?? [];
  tabSet(`sb-payment-${c.payment_id}`, { c: { ...c, manage_url: null }, body, method, paid: kept?.paid, replaced } satisfies ShownPayment);
  const status = h('p', { id: 'payment-status', class: 'status', role: 'status' }, restored ? '' : WAITING);
  const heading = h('h2', { tabindex: -1 }, `Pay ${sats(c.amount_sats ?? plan.amount_sats)} for `, theirs(plan.name));
  const view = paymentView({ ...c, amount_sats: c.amount_sats ?? plan.amount_sats }, 'pay');
  // A returning subscriber's other contact details were not stored: said where they look (found from
  // outside: dropped in silence, the seller's messages still going where they went).
  const note = c.contacts_unchanged ? h('p', { id: 'contacts-note', class: 'hint' }, CONTACTS_UNCHANGED) : null;
  const section = h('section', { id: 'pay', 'aria-labelledby': 'pay-heading' }, heading, view, note, status);
  heading.id = 'pay-heading';
  setMain(planHeader(plan), section);
  titled('Pay for', plan);
  heading.focus();

  /** Focus lost with what held it (a button gone): back on the heading, which says what is shown. */
  const keepFocus = () => {
    if (!section.contains(document.activeElement)) heading.focus();
  };
  /**
   * Paid, being applied (once, not at each answer): nothing is left to pay with, the heading says so, and
   * the portal link this tab holds is shown already (billing may be away for a while).
   */
  let receivedShown = false;
  const received = () => {
    if (receivedShown) {
      // An error said meanwhile ("Still checking…") is over once it answers again.
      if (status.textContent !== APPLYING) status.replaceChildren(APPLYING);
      return;
    }
    receivedShown = true;
    titled('Paid for', plan);
    const focusWasIn = section.contains(document.activeElement);
    view.remove();
    heading.textContent = 'Payment received';
    const link = linkOf(c.payment_id);
    shownLinkKeys = link ? [`sb-link-${c.payment_id}`] : [];
    shownLink = link;
    status.replaceChildren(APPLYING);
    const linkParagraph = portalLinkParagraph(link);
    if (linkParagraph) section.append(linkParagraph);
    if (focusWasIn && !section.contains(document.activeElement)) heading.focus();
  };
  // Withdrawn because the seller stopped offering the plan (found from outside: "expired", and a fresh
  // invoice offered that could only end on "Plan not found"). Its payment is still followed.
  const withdrawn = () => {
    forgetDraft(plan.id);
    heading.textContent = 'This plan is no longer offered';
    titled('No longer offered:', plan);
    status.textContent = 'The seller stopped offering this plan: it can no longer be paid for here. Nothing was charged.';
    keepFocus();
  };
  // Expired or failed: why, asked before anything is said (one announcement, not "expired" then another).
  const ended = async (settled: string, replacedBy?: string): Promise<void> => {
    const mine = following;
    // Withdrawn because a late payment of the contact's earlier checkout started the subscription (found
    // from outside: "expired", and a fresh invoice refused with a 409): that payment is followed instead.
    if (replacedBy) {
      // Nothing is left to pay with here, whatever that payment's status answers (found in review).
      received();
      return follow(replacedBy, 0);
    }
    const [earlier, gone] = await Promise.all([
      replaced.length ? firstPaid(replaced) : null,
      api('GET', `/public/plan/${encodeURIComponent(plan.id)}`).then(
        () => false,
        (err) => err instanceof ApiError && err.status === 404,
      ),
    ]);
    if (mine !== following) return;
    if (earlier) return follow(earlier, 0);
    followLate([c.payment_id, ...replaced], (id) => follow(id, 0));
    // What can no longer be paid is not left on the screen to be paid, nor named by the focused heading
    // (found from outside: "Pay 21,000 sats for Gold" above "expired"). The focus in it (its Copy button)
    // goes to the heading that says what happened, not to the page's body (found from outside).
    const focusWasIn = view.contains(document.activeElement);
    view.remove();
    if (gone) return withdrawn();
    heading.textContent = settled === 'expired' ? 'Payment request expired' : 'Payment failed';
    titled(settled === 'expired' ? 'Payment request expired:' : 'Payment failed:', plan);
    const again = h(
      'button',
      { type: 'button', id: 'fresh-invoice', onclick: () => void fresh() },
      method === 'lightning' ? 'Get a fresh invoice' : 'Start the payment again',
    );
    status.replaceChildren(
      settled === 'expired' ? 'This payment request expired before it was paid. Nothing was charged. ' : 'The payment failed. Nothing was charged. ',
      again,
    );
    // After its words changed: focused before, it would be read out as the invoice to pay (found in review).
    if (focusWasIn) heading.focus();

    async function fresh(): Promise<void> {
      setBusy(again, true);
      const still = currentView();
      // An ended payment found paid meanwhile (the late following) is followed in this view's place.
      const mine = following;
      try {
        const r = await api<Checkout>('POST', '/public/subscribe', { body: { ...body, payment_method: method } });
        // Back or Forward meanwhile drew another view, or a payment was found paid: not drawn over it.
        if (!still() || mine !== following) return;
        keepLink(r, c.payment_id);
        history.replaceState(null, '', `${location.pathname}?payment=${encodeURIComponent(r.payment_id)}`);
        showPayment(plan, r, body, method, false, [c.payment_id, ...replaced]);
        announce('A fresh invoice is ready');
      } catch (err) {
        if (!still() || mine !== following) return;
        // The plan was archived meanwhile: no invoice can be had any more; the ended ones are still followed.
        if (err instanceof ApiError && err.status === 404) return withdrawn();
        // Another checkout of this contact took its place (another tab, another method) or it was
        // paid or cancelled meanwhile: asking again can only be refused again, so no button (found
        // from outside: a loop). Any other conflict (a concurrent change) keeps the button.
        if (err instanceof ApiError && err.status === 409 && err.message.startsWith(ALREADY_SUBSCRIBED)) {
          heading.textContent = 'This checkout can no longer be paid here';
          forgetDraft(plan.id);
          status.textContent = replacedHelp(plan);
          heading.focus();
          return;
        }
        // The message beside the button, which keeps the focus.
        setBusy(again, false);
        status.replaceChildren(`${err instanceof ApiError ? err.message : 'A new invoice could not be created.'} `, again);
        again.focus();
      }
    }
  };
  const follow = (paymentId: string, firstMs: number) =>
    followStatus(
      paymentId,
      firstMs,
      (answer) =>
        answer.status !== 'paid'
          ? void ended(answer.status, answer.replaced_by)
          : answer.applied === false
            ? status.replaceChildren(slowToApply(answer))
            : settledPaid(plan, answer, c.payment_id),
      (err) => {
        // Said once: a live region rewritten with the same words is read out again at every poll (found from outside).
        const words = stillChecking(err);
        if (status.textContent !== words) status.textContent = words;
        return false;
      },
      // The server answers again: a connection error said earlier is no longer true.
      (answer) => {
        if (answer.status === 'paid') received();
        else if (status.textContent !== WAITING) status.textContent = WAITING;
        return true;
      },
    );
  follow(c.payment_id, restored ? 0 : POLL_MS);
}

/**
 * A status that could not be read: the page asks again by itself, so the API's "please retry" or "check
 * your connection and try again" is not for the person.
 */
function stillChecking(err: unknown): string {
  const why = err instanceof ApiError && err.status === 0 ? 'The server cannot be reached just now' : 'The service did not answer just now';
  return `Still checking your payment… ${why}; this page asks again by itself.`;
}

/** What the service says of a payment now (the one public read the page follows payments by). */
const paymentStatus = (paymentId: string) => api<PaymentStatus>('GET', `/public/payment/${encodeURIComponent(paymentId)}/status`);

const APPLYING = 'Payment received. Starting your subscription…';
const applyingWords = (s: PaymentStatus) => (s.purpose === 'renewal' ? 'Payment received. Renewing your subscription…' : APPLYING);
/** Paid, and still not applied after DECIDING_MAX_MS (billing away): true, and what to do. */
const slowToApply = (s: PaymentStatus) =>
  `Payment received. Applying it to your subscription is taking longer than usual${s.purpose === 'renewal' ? '' : ' (it starts once it is)'}; this page has stopped checking: reload it later to see the result.`;

/**
 * Asks for a payment's status, the first time after `firstMs`, then every POLL_MS while it is pending or
 * being applied; `settled` hears any other status (the asking stops). A failed ask goes to `unreadable`,
 * and is asked again after twice the wait unless that answers true (nothing more to ask). `pending` hears
 * each answer that is not settled, and answers false when there is nothing more to follow.
 */
function followStatus(
  paymentId: string,
  firstMs: number,
  settled: (s: PaymentStatus) => void,
  unreadable: (err: unknown) => boolean,
  pending?: (s: PaymentStatus) => boolean,
): void {
  stopFollowing();
  const mine = following;
  let paidSeen: number | null = null;
  const poll = async (): Promise<void> => {
    let s: PaymentStatus;
    try {
      s = await paymentStatus(paymentId);
    } catch (err) {
      if (mine !== following) return;
      if (!unreadable(err)) pollTimer = window.setTimeout(poll, POLL_MS * 2);
      return;
    }
    // The view changed while it was asked (Back, a fresh invoice): this answer is no one's any more.
    if (mine !== following) return;
    const next = nextAsk(s, paidSeen, Date.now());
    paidSeen = next.paidSeen;
    if (next.askIn === null) return settled(s);
    if (pending?.(s) === false) return;
    pollTimer = window.setTimeout(poll, next.askIn);
  };
  pollTimer = window.setTimeout(poll, firstMs);
}

/**
 * The first of these payments that is paid, if any (one that cannot be read counts as not paid), or the
 * payment that paid in the place of one withdrawn for it.
 */
async function firstPaid(ids: string[]): Promise<string | null> {
  const answers = await Promise.all(
    ids.map((id) =>
      paymentStatus(id).then(
        (s) => (s.status === 'paid' ? id : (s.replaced_by ?? null)),
        () => null,
      ),
    ),
  );
  return answers.find((id) => id !== null) ?? null;
}

/**
 * Payments that ran out or failed (the one shown, and those it replaced), while their view is shown:
 * asked again at a slower pace, since one that arrives late (an on-chain transaction confirming, a wallet
 * paying at the last moment) is still recorded as paid (found from outside: the page said "Nothing was
 * charged" for a payment made). `found` hears the first seen paid. Not asked while the tab is hidden (at
 * once when it is shown again), nor after LATE_FOLLOW_MS: a checkout is open for a day at most.
 */
function followLate(ids: string[], found: (paymentId: string) => void): void {
  stopFollowing();
  const mine = following;
  const ended = Date.now();
  const until = ended + LATE_FOLLOW_MS;
  const poll = async (): Promise<void> => {
    if (mine !== following || Date.now() > until) return;
    if (document.hidden) {
      document.addEventListener('visibilitychange', () => void poll(), { once: true });
      return;
    }
    const paid = await firstPaid(ids);
    if (mine !== following) return;
    if (paid) return found(paid);
    pollTimer = window.setTimeout(poll, latePace(ended, Date.now()));
  };
  pollTimer = window.setTimeout(poll, LATE_POLL_MS);
}

/**
 * A payment seen paid and settled by the service: applied (subscribed), or too late. `shownId`: the
 * payment view's own payment, which keeps the tab's link and is noted paid.
 */
function settledPaid(plan: PublicPlan, s: PaymentStatus, shownId: string, startedHere = true): void {
  keepPaid(shownId, !!s.unapplied);
  const renewal = s.purpose === 'renewal';
  if (s.unapplied) paidTooLate(plan, renewal);
  // A renewal paid through its processor comes back here too (found from outside: "You are subscribed").
  else if (renewal) done(plan, `Payment received: your subscription to ${plan.name} is renewed.`, null, [], 'renewal', 'Renewal paid');
  else paidHere(plan, shownId, startedHere);
}

/** Subscribed by a checkout's payment: said with the portal link this tab holds for that payment. */
const paidHere = (plan: PublicPlan, paymentId: string, startedHere = true) =>
  done(plan, paidMessage(plan), linkOf(paymentId), [`sb-link-${paymentId}`], startedHere);

/**
 * Paid after the checkout ended: the payment is recorded, the subscription did not start. `plan`: null
 * when the plan itself is gone (withdrawn), so there is no plan to head the page with.
 */
function paidTooLate(plan: PublicPlan | null, renewal = false): void {
  stopFollowing();
  if (plan) forgetDraft(plan.id);
  const heading = h(plan ? 'h2' : 'h1', { tabindex: -1, id: 'late-heading' }, 'Payment received too late');
  setMain(
    plan ? planHeader(plan) : null,
    h(
      'section',
      { id: 'paid-late', 'aria-labelledby': 'late-heading' },
      heading,
      h(
        'p',
        { id: 'late-message' },
        `Your payment arrived after this ${renewal ? 'renewal could no longer be paid, so it did not renew your subscription' : 'checkout had ended, so it did not start a subscription'}. The seller is told to refund it; please contact them.`,
      ),
    ),
  );
  // Not "Paid for …", which reads as a success (found in review).
  if (plan) titled('Payment received too late:', plan);
  else document.title = 'Payment received too late';
  heading.focus();
}

/**
 * Subscribed without a payment view: said, and kept in the address and this tab for a reload. `over`: it
 * comes after Back or Forward drew another view, whose entry is kept (a new one for this).
 */
function subscribed(plan: PublicPlan, subscriptionId: string, message: string, link: string | null, heading?: string, over = false): void {
  tabSet(`sb-subscribed-${subscriptionId}`, { message, link, at: Date.now(), ...(heading ? { heading } : {}) } satisfies Subscribed);
  history[over ? 'pushState' : 'replaceState'](null, '', `${location.pathname}?subscribed=${encodeURIComponent(subscriptionId)}`);
  done(plan, message, link, [`sb-subscribed-${subscriptionId}`], true, heading);
}

/** An address of a subscription's result that this tab does not hold: where that result and its link are. */
function subscribedElsewhere(plan: PublicPlan): string {
  return `This address showed a subscription's confirmation, which is kept only for a while in the tab where it was made. ${whereTheLinkIs(plan, 'confirmationElsewhere')}. The form below starts a new subscription.`;
}

/**
 * Where the portal link is when this page has none to show, in one place: whether the seller sends
 * messages (the plan has channels) decides between "in your messages" and "the seller can send it".
 * - `startedHere`: this tab started the checkout without being given one (the contact subscribed before:
 *   their link came then); `startedElsewhere`: the checkout was started in another tab;
 * - `renewal`: paid from the subscription's page (the portal, or a reminder's link to it): no confirmation
 *   message is promised, the subscriber may have turned them off (found from outside);
 * - `confirmationElsewhere`: a `?subscribed=` address this tab does not hold; `existing`: a 409 for a
 *   contact already subscribed; `replaced`: a checkout another one took the place of.
 */
function whereTheLinkIs(
  plan: PublicPlan,
  situation: 'startedHere' | 'startedElsewhere' | 'renewal' | 'confirmationElsewhere' | 'existing' | 'replaced',
): string {
  const messages = !!plan.available_contact_methods?.length;
  switch (situation) {
    case 'renewal':
      return 'The page of your subscription, where you paid from, shows it renewed.';
    case 'startedElsewhere':
      return `The link to manage your subscription is on the page where you started${messages ? ' and in your confirmation message' : ''}.`;
    case 'startedHere':
      return messages
        ? 'The link to manage your subscriptions is in your confirmation message.'
        : 'The link to manage your subscriptions was shown when you first subscribed; the seller can send it to you again.';
    case 'confirmationElsewhere':
      return messages ? 'The link to manage it is in your confirmation message' : 'The link to manage it was shown there; the seller can send it to you again';
    case 'existing':
      return `its link to manage it (and to pay a renewal that is due) was shown when it started${messages ? ' and is in your messages about it' : '; the seller can send it to you again'}`;
    case 'replaced':
      return messages ? 'the link to manage your subscription is in your messages' : 'the seller can send you the link to manage your subscription';
  }
}

/**
 * Subscribed: the message, and the portal link this tab was given for it (else where to find it).
 * `linkKeys`: where that link is kept, forgotten once this result is left. `startedHere`: this tab
 * started the checkout (else the link may be in the tab that did), or 'renewal': no checkout, a renewal.
 */
function done(
  plan: PublicPlan,
  message: string,
  link: string | null,
  linkKeys: string[] = [],
  startedHere: boolean | 'renewal' = true,
  title = 'You are subscribed',
): void {
  stopFollowing();
  forgetDraft(plan.id);
  shownLinkKeys = link ? linkKeys : [];
  shownLink = link;
  const heading = h('h2', { tabindex: -1, id: 'done-heading' }, title);
  setMain(
    planHeader(plan, startedHere === 'renewal' ? 'Renewal of' : 'Subscribe to'),
    h(
      'section',
      { id: 'done', class: 'success', 'aria-labelledby': 'done-heading' },
      heading,
      // The plan's name in it keeps its own direction ("מנוי VIP" is not shown as "VIP מנוי").
      h('p', { id: 'done-message' }, naming(message, plan.name)),
      portalLinkParagraph(link) ??
        h('p', { id: 'link-elsewhere' }, whereTheLinkIs(plan, startedHere === 'renewal' ? 'renewal' : startedHere ? 'startedHere' : 'startedElsewhere')),
    ),
  );
  titled(title === 'You are subscribed' ? 'Subscribed to' : 'Paid for', plan);
  heading.focus();
  announce(message);
}

/**
 * Back from a card or wallet processor (or any link naming a payment): the payment's state, followed
 * until it is settled. The dev processors send the payer here first, to a button that pays.
 */
function followPayment(plan: PublicPlan, paymentId: string, devProcessor: boolean): void {
  stopFollowing();
  const status = h('p', { id: 'payment-status', class: 'status', role: 'status' }, 'Checking your payment…');
  const heading = h('h2', { tabindex: -1, id: 'pay-heading' }, 'Your payment for ', theirs(plan.name));
  const section = h('section', { id: 'pay', 'aria-labelledby': 'pay-heading' }, heading, status);
  setMain(planHeader(plan), section);
  titled('Pay for', plan);
  heading.focus();
  const again = () => h('a', { href: location.pathname, id: 'start-again' }, 'Start again');
  // A link naming another plan's payment (found from outside: shown as this plan's subscription).
  const ofPlan = (answer: PaymentStatus): boolean => {
    if (!answer.plan_id || answer.plan_id === plan.id) return true;
    titled("Not this plan's payment:", plan);
    say('This payment is not for this plan. Nothing was charged through this link. ', again());
    return false;
  };

  let said = '';
  const say = (...content: (string | HTMLElement)[]) => {
    const text = content.map((c) => (typeof c === 'string' ? c : c.textContent)).join('');
    // The live region speaks only when what it says changes.
    if (text !== said) status.replaceChildren(...content);
    said = text;
  };
  /** The dev processor's page, while it is shown: removed once the payment is settled elsewhere. */
  let devBox: HTMLElement | null = null;
  const notPaidYet = () =>
    say(
      'Not paid yet. If you have paid, this page shows it as soon as the payment provider confirms it; if you left without paying, go back to the page you came from, or ',
      again(),
      '.',
    );
  // `asked`: the payment followed, this one or the one that paid in its place (its own is withdrawn).
  const poll = (firstMs = 0, whilePending = notPaidYet, asked = paymentId): void =>
    followStatus(
      asked,
      firstMs,
      (answer) => {
        if (devBox?.isConnected) {
          // Its buttons go; the focus, if on one of them, goes where the outcome is told.
          const focused = devBox.contains(document.activeElement);
          devBox.remove();
          if (focused) heading.focus();
        }
        if (!ofPlan(answer)) return;
        const settled = answer.status;
        if (settled === 'paid' && answer.applied === false) return say(slowToApply(answer));
        if (settled === 'paid') return settledPaid(plan, answer, paymentId, !!shownPayment(paymentId));
        if (answer.replaced_by) return poll(0, whilePending, answer.replaced_by);
        // The tab says it too (found from outside: "Pay for" on a payment that can no longer be paid).
        titled(settled === 'expired' ? 'Payment expired:' : 'Payment failed:', plan);
        say(settled === 'expired' ? 'This payment expired before it was paid. Nothing was charged. ' : 'The payment failed. Nothing was charged. ', again());
        // Paid late after all: said as the service settles it (found in review: not followed here).
        followLate([paymentId], () => poll());
      },
      (err) => {
        if (err instanceof ApiError && (err.status === 404 || err.status === 422)) {
          titled('Payment not found:', plan);
          say('This payment is not known here. Nothing was charged through this link. ', again());
          return true;
        }
        say(stillChecking(err));
        return false;
      },
      (answer) => {
        if (!ofPlan(answer)) return false;
        if (answer.status === 'paid') say(applyingWords(answer));
        else whilePending();
        return true;
      },
    );
  if (devProcessor) {
    // Its payment first: another plan's (found from outside: its test payment offered under this plan's
    // name), or one already settled, is told as without the dev provider.
    const mine = following;
    paymentStatus(paymentId).then(
      (answer) => {
        if (mine !== following) return;
        if (answer.status === 'pending' && ofPlan(answer)) devPage();
        else if (answer.status !== 'pending') poll();
      },
      () => {
        if (mine === following) poll();
      },
    );
    return;
  }
  poll();

  function devPage(): void {
    // Stands in for the processor's own page: nothing is charged anywhere.
    const back = () => history.replaceState(null, '', `${location.pathname}?payment=${encodeURIComponent(paymentId)}`);
    const payButton = h('button', { type: 'button', id: 'dev-pay' }, 'Pay (test payment)');
    const cancelButton = h('button', { type: 'button', id: 'dev-cancel', class: 'secondary' }, 'Cancel');
    const box = h(
      'div',
      { id: 'dev-processor', class: 'payment' },
      h('p', {}, 'Test payment page of the dev provider: no card or account is charged.'),
      h('p', {}, payButton, ' ', cancelButton),
    );
    payButton.addEventListener('click', async () => {
      setBusy(payButton, true);
      try {
        await api('POST', `/dev/payments/${encodeURIComponent(paymentId)}/pay`);
        // Settled meanwhile (seen by the page's own following): that view stands.
        if (!box.isConnected) return;
        box.remove();
        back();
        // The focused button is gone: the focus goes where the outcome is told.
        heading.focus();
        poll();
      } catch (err) {
        if (!box.isConnected) return;
        setBusy(payButton, false);
        say(err instanceof ApiError ? err.message : 'The test payment could not be made.');
        payButton.focus();
      }
    });
    cancelButton.addEventListener('click', () => {
      back();
      // This tab showed the payment: shown again, with what pays it, as a real processor's cancel URL shows it.
      const shown = shownPayment(paymentId);
      if (shown && shown.body.plan_id === plan.id) return showPayment(plan, shown.c, shown.body, shown.method, true);
      box.remove();
      poll();
      heading.focus();
    });
    section.insertBefore(box, status);
    say('Not paid yet.');
    devBox = box;
    // Paid or ended elsewhere (the checkout's own tab, the portal) while this page is open: it follows,
    // as a processor's page would not offer a payment already made (found from outside: a stale button).
    poll(POLL_MS, () => say('Not paid yet.'));
  }
}

/** `tries`: loads that met an outage before this one (then it loads again by itself, see loadAgainLater). */
async function main(back: boolean, tries = 0): Promise<void> {
  const view = ++views;
  stopFollowing();
  if (!planId || planId === 'checkout') {
    document.title = PLAN_NOT_FOUND;
    setMain(h('h1', {}, PLAN_NOT_FOUND), h('p', {}, NO_PLAN_NAMED));
    return;
  }
  try {
    const plan = await api<PublicPlan>('GET', `/public/plan/${encodeURIComponent(planId)}`);
    if (view !== views) return;
    // A payment named in the address: where a card or wallet processor sends the payer back, or this
    // page's own payment after a reload or Back (shown again as it was, if this tab showed it).
    const query = new URLSearchParams(location.search);
    const paymentId = query.get('payment');
    const shown = paymentId ? shownPayment(paymentId) : null;
    const kept = tabGet<Subscribed>(`sb-subscribed-${query.get('subscribed')}`);
    const started = kept && Date.now() - kept.at < LINK_KEPT_MS ? kept : null;
    const ours = shown && shown.body.plan_id === plan.id && query.get('processor') !== 'dev';
    // Seen paid in this tab: paid it stays, so it is not shown as an invoice to pay until its status answers.
    if (ours && shown.late) paidTooLate(plan);
    else if (ours && shown.paid) paidHere(plan, shown.c.payment_id);
    else if (ours) showPayment(plan, shown.c, shown.body, shown.method, true);
    else if (paymentId) followPayment(plan, paymentId, query.get('processor') === 'dev');
    else if (started) done(plan, started.message, started.link, [`sb-subscribed-${query.get('subscribed')}`], true, started.heading);
    else if (query.has('subscribed')) {
      // A result kept only in the tab it was shown in, for a while (found from outside: opened in another
      // tab, a bare form with nothing said). The address is the form's again.
      history.replaceState(null, '', location.pathname);
      render(plan, back, subscribedElsewhere(plan));
    } else render(plan, back);
    if (tries) loadedAgain(`${document.title}: loaded.`);
  } catch (err) {
    // A payment of a plan withdrawn since (reloaded, or back from a processor): a late payment is still
    // said as it is, not hidden behind "Plan not found" (found from outside).
    const paymentId = new URLSearchParams(location.search).get('payment');
    if (paymentId && err instanceof ApiError && err.status === 404) {
      const s = await paymentStatus(paymentId).catch(() => null);
      if (view === views && s?.status === 'paid' && s.unapplied && s.plan_id === planId) return paidTooLate(null);
    }
    if (view !== views) return;
    planUnavailable(err);
    // Back or Forward meanwhile drew another view (views moved on): that one stays.
    if (passing(err)) loadAgainLater(tries, () => view === views && void main(back, tries + 1));
  }
}

// Back and Forward between the form and a payment view show what the address names; the focus goes to
// the content, as after any change of view (not left on the page's body).
window.addEventListener('popstate', () => {
  forgetShownLinks();
  unanswered = null;
  refusedLink = null;
  void main(true).then(() => {
    if (!document.activeElement || document.activeElement === document.body) document.getElementById('main')?.focus();
  });
});

/** The plan cannot be had: gone (not found), or the service cannot say now. */
function planUnavailable(err: unknown): void {
  stopFollowing();
  announce('');
  const notFound = err instanceof ApiError && (err.status === 404 || err.status === 422);
  // Gone for good: nothing typed for it is of use; a passing outage keeps it for the next Back.
  if (notFound && planId) forgetDraft(planId);
  if (stillUnavailable(err)) return;
  document.title = notFound ? PLAN_NOT_FOUND : 'Checkout unavailable';
  const heading = h('h1', { tabindex: -1 }, notFound ? PLAN_NOT_FOUND : 'Checkout unavailable');
  setMain(
    heading,
    h('p', { role: 'alert' }, notFound ? PLAN_NOT_OFFERED : err instanceof ApiError ? err.message : 'The plan could not be loaded.'),
    notFound ? null : tryAgain(err),
  );
  // The form and its focused button are gone (archived while it was open): focus on what is there now,
  // as every other view change does (found from outside: left on <body>).
  heading.focus();
}

void main(loadedBack);
