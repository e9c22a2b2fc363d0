import { STILL_IN_PROGRESS } from '@sb/contracts/page-words';
import { encode } from 'uqr';
import './style.css';

// Busy until a page puts its content in (setMain); set here, not in the HTML, so that without
// JavaScript the page is not announced as loading for ever.
document.getElementById('main')?.setAttribute('aria-busy', 'true');

/** The pages are served by the gateway itself, so the API is on the same origin. */
export const API = '/subscriptions_manager/api/v1';

/** A validation problem the API names a field for (`detail: [{loc: ['body', field], msg}]`). */
export interface FieldProblem {
  field: string;
  msg: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly fields: FieldProblem[] = [],
  ) {
    super(message);
  }
}

/** The field-level problems of an API error answer, so a page can show each beside its field. */
function fieldProblems(body: unknown): FieldProblem[] {
  const detail = (body as { detail?: unknown } | undefined)?.detail;
  if (!Array.isArray(detail)) return [];
  return detail.map((d: { loc?: unknown[]; msg?: string }) => ({ field: String(d.loc?.[d.loc.length - 1] ?? ''), msg: d.msg ?? '' })).filter((p) => p.field);
}

/**
 * A size limit in the schema library's words ("Too big: expected string to have <=254 characters") in a
 * person's (found from outside: shown as it was under the e-mail field).
 */
function plainWords(msg: string): string {
  const size = /^Too (big|small): expected string to have [<>]=(\d+) characters?$/.exec(msg.trim());
  if (!size) return msg;
  return size[1] === 'big' ? `This is too long: ${size[2]} characters at most.` : `This is too short: at least ${size[2]} characters.`;
}

/**
 * A server message about a field, worded for the person beside that field: the API's messages start
 * with the field's own name ("nostr must be an npub…"), which the field's label already says.
 */
export function fieldMessage(p: FieldProblem): string {
  let m = plainWords(p.msg).trim() || 'is not valid';
  if (m.toLowerCase().startsWith(`${p.field.toLowerCase()} `)) m = m.slice(p.field.length + 1);
  if (/^must be /i.test(m)) m = `Enter ${m.slice('must be '.length)}`;
  m = m.charAt(0).toUpperCase() + m.slice(1);
  return /[.!?]$/.test(m) ? m : `${m}.`;
}

/** Field names as a person reads them, for validation errors. */
const FIELD_LABELS: Record<string, string> = {
  email: 'E-mail',
  name: 'Name',
  messenger: 'Telegram username',
  nostr: 'Nostr address',
  payment_method: 'Payment method',
  nwc_connection_string: 'Wallet connection string',
  nwc_string: 'Wallet connection string',
  max_amount_sats: 'Payment limit',
  subscription_id: 'Subscription',
};

/** An API error answer (`{"detail": string | [{loc, msg}]}`) in words. */
/**
 * Marks a control busy while its request runs: announced as unavailable (aria-disabled) and inert to
 * presses (below), but it keeps the focus. A disabled control drops the focus to <body> for the whole
 * wait, so Tab starts over and a screen reader loses its place (found from outside).
 */
export function setBusy(el: HTMLElement, on: boolean): void {
  if (on) el.setAttribute('aria-disabled', 'true');
  else el.removeAttribute('aria-disabled');
}

// A press on a busy control does nothing: no toggle, no second submit (Enter in a field "clicks" the
// form's default button, so that is stopped here too).
if (typeof document !== 'undefined') {
  document.addEventListener(
    'click',
    (e) => {
      if ((e.target as Element | null)?.closest?.('[aria-disabled="true"]')) {
        e.preventDefault();
        e.stopImmediatePropagation();
      }
    },
    true,
  );
}

/** The service's words as a sentence on the page: ending in a full stop. */
export const sentence = (s: string): string => (/[.!?]$/.test(s) ? s : `${s}.`);

export function errorText(status: number, body: unknown): string {
  const detail = (body as { detail?: unknown } | undefined)?.detail;
  if (Array.isArray(detail)) {
    return detail
      .map((d: { loc?: unknown[]; msg?: string }) => {
        const field = String(d.loc?.[d.loc.length - 1] ?? '');
        const label = FIELD_LABELS[field];
        const msg = d.msg === undefined ? undefined : plainWords(d.msg);
        return label ? `${label}: ${msg ?? 'is not valid'}` : (msg ?? 'Something in the form is not valid');
      })
      .join('. ');
  }
  if (typeof detail === 'string' && detail) {
    if (status === 429) return 'Too many attempts in a short time. Please wait a moment and try again.';
    return sentence(detail);
  }
  if (status >= 500) return 'The service is not available right now. Please try again in a moment.';
  return `The request failed (HTTP ${status}).`;
}

/**
 * How long a page waits for an answer: past the gateway's own waits (it answers 503 when a service is
 * slow, after 30 s at most on the pages' routes by default), so only a connection that hangs (a phone
 * between networks) runs into it, and the page says so instead of waiting for ever. `api`'s `waitMs`
 * is for the routes that wait longer (the NWC checkout).
 */
export const ANSWER_WAIT_MS = 60_000;

/**
 * No answer in time: the gateway gave up waiting (503 "did not answer in time"; 504 from a proxy, or
 * the page's own limit): the service may still make the change, so this is not a refusal. Not
 * reachable, not running, or refused are definite.
 */
export function unconfirmed(err: unknown): boolean {
  return err instanceof ApiError && (err.status === 504 || (err.status === 503 && /did not answer in time/i.test(err.message)));
}

/** The service still handles an earlier send of the same request (same Idempotency-Key). */
export const stillInProgress = (err: unknown): boolean => err instanceof ApiError && err.status === 409 && err.message.startsWith(STILL_IN_PROGRESS);

/** What a page says for stillInProgress. */
export const EARLIER_TRY = 'Your earlier try is still being handled. Please try again in a moment: it is not made twice.';

/**
 * No answer that settles the request (not reached, a 5xx, still in progress): sent again, it is the same
 * request, with the same Idempotency-Key.
 */
export const noAnswer = (err: unknown): boolean => (err instanceof ApiError && (err.status === 0 || err.status >= 500)) || stillInProgress(err);

/** The answer did not come in time: the request may still have been made (as for a gateway's 504). */
export const NO_ANSWER = 'The server did not answer in time. Check your connection and try again.';

export async function api<T>(
  method: string,
  path: string,
  /** `form`: a form-encoded body instead of JSON (the unsubscribe link's one-click POST, as a mail client sends it). */
  opts: { body?: unknown; form?: string; token?: string; waitMs?: number; idempotencyKey?: string } = {},
): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.form !== undefined) headers['Content-Type'] = 'application/x-www-form-urlencoded';
  if (opts.token) headers['X-Subscriber-Token'] = opts.token;
  if (opts.idempotencyKey) headers['Idempotency-Key'] = opts.idempotencyKey;
  const abort = new AbortController();
  const timer = window.setTimeout(() => abort.abort(), opts.waitMs ?? ANSWER_WAIT_MS);
  let res: Response;
  let text: string;
  try {
    const body = opts.form ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body));
    res = await fetch(API + path, { method, headers, body, signal: abort.signal });
    text = await res.text();
  } catch {
    throw abort.signal.aborted ? new ApiError(504, NO_ANSWER) : new ApiError(0, 'Could not reach the server. Check your connection and try again.');
  } finally {
    window.clearTimeout(timer);
  }
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (!res.ok) throw new ApiError(res.status, errorText(res.status, body), fieldProblems(body));
  return body as T;
}

type Child = Node | string | null | undefined | false;

/** A DOM element with attributes (`on*` functions become listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number | boolean | ((e: Event) => void) | null | undefined> = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

let announcing: number | undefined;
/** Says something to screen-reader users without moving their focus; '' clears what was said (and what is about to be). */
export function announce(text: string): void {
  const el = document.getElementById('announcer');
  if (!el) return;
  window.clearTimeout(announcing);
  el.textContent = '';
  if (text) announcing = window.setTimeout(() => (el.textContent = text), 50);
}

/** The service is away or busy for now (no connection, a 5xx, a 429): a page may ask again by itself; another 4xx it may not. */
export const passing = (err: unknown): boolean => err instanceof ApiError && (err.status === 0 || err.status === 429 || err.status >= 500);

/** How long a page whose load met an outage waits before it loads again by itself, by try (then the last). */
const LOAD_AGAIN_AFTER_MS = [3000, 5000, 10_000, 30_000, 60_000];

/**
 * A page whose load met an outage (the service restarting, a phone between networks) loads again by
 * itself, slower each try and only while it is shown, so nobody has to find "Try again" (found from
 * outside: a portal opened while billing restarted said "could not be loaded" until reloaded by hand).
 * The view drawn meanwhile says so (`loadsAgain`).
 */
export function loadAgainLater(tries: number, again: () => void): void {
  const go = (): void => {
    if (document.hidden) document.addEventListener('visibilitychange', go, { once: true });
    else again();
  };
  window.setTimeout(go, LOAD_AGAIN_AFTER_MS[Math.min(tries, LOAD_AGAIN_AFTER_MS.length - 1)]);
}

/**
 * What an unavailable view says under its error: a passing outage loads the page again by itself (with a
 * link that loads it at once), another error only by hand.
 */
export const tryAgain = (err: unknown): HTMLElement =>
  passing(err)
    ? h('p', { id: 'loads-again' }, 'This page tries again by itself in a moment. ', h('a', { href: location.href }, 'Try again now'))
    : h('p', {}, h('a', { href: location.href }, 'Try again'));

/**
 * A load that met the outage again, with its unavailable view shown: the view stays as it is (its alert is
 * not read out anew at every try), its link loading the address shown now (Back or Forward may have changed it).
 */
export function stillUnavailable(err: unknown): boolean {
  const link = passing(err) ? document.querySelector('#loads-again a') : null;
  link?.setAttribute('href', location.href);
  return link !== null;
}

/** Loaded after an outage: the person hears it, and the focus is not left on <body> (the view it was on is gone). */
export function loadedAgain(words: string): void {
  announce(words);
  if (!document.activeElement || document.activeElement === document.body) document.getElementById('main')?.focus();
}

/** A fresh Idempotency-Key (getRandomValues: randomUUID needs a secure context, a page may be served over plain http). */
export const randomKey = (): string => Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');

// "Skip to content" moves the focus without a history entry: a fragment change is a popstate, which the
// checkout takes for Back (found from outside: the form emptied, the one-time portal link forgotten).
document.querySelector('a.skip')?.addEventListener('click', (e) => {
  const main = document.getElementById('main');
  if (!main) return;
  e.preventDefault();
  main.focus();
});

export function setMain(...children: Child[]): HTMLElement {
  const main = document.getElementById('main')!;
  main.replaceChildren(...(children.filter(Boolean) as (Node | string)[]));
  main.removeAttribute('aria-busy');
  return main;
}

const SVG = 'http://www.w3.org/2000/svg';

/** A QR code as an SVG image (one path; drawn here, so no markup from elsewhere is injected). */
export function qrCode(text: string, label: string): SVGSVGElement {
  const { data, size } = encode(text, { ecc: 'M', border: 2 });
  let d = '';
  for (const [y, row] of data.entries()) for (const [x, dark] of row.entries()) if (dark) d += `M${x} ${y}h1v1h-1z`;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${size} ${size}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  svg.setAttribute('class', 'qr');
  svg.setAttribute('shape-rendering', 'crispEdges');
  const bg = document.createElementNS(SVG, 'rect');
  bg.setAttribute('width', String(size));
  bg.setAttribute('height', String(size));
  bg.setAttribute('fill', '#fff');
  const path = document.createElementNS(SVG, 'path');
  path.setAttribute('d', d);
  path.setAttribute('fill', '#000');
  svg.append(bg, path);
  return svg;
}

/**
 * Text the seller wrote (a plan or merchant name) inside our own words: its direction is its own, so an
 * Arabic or Hebrew name keeps its punctuation on its side, and our sentence keeps its order around it.
 */
export const theirs = (text: string) => h('span', { dir: 'auto' }, text);

/**
 * A sentence that names the seller's text (ours, or the service's, kept as a string for a reload), with
 * that text isolated as theirs() isolates it: where it stands as a whole word, at its first place.
 */
export function naming(sentence: string, text: string): (string | HTMLElement)[] {
  if (!text) return [sentence];
  for (let at = sentence.indexOf(text); at >= 0; at = sentence.indexOf(text, at + 1)) {
    const end = at + text.length;
    if ((at === 0 || /\s/.test(sentence[at - 1]!)) && (end === sentence.length || /[\s.,;:!?]/.test(sentence[end]!)))
      return [sentence.slice(0, at), theirs(text), sentence.slice(end)].filter((c) => c !== '');
  }
  return [sentence];
}

/** As satsText of the contracts (the pages do not bundle them): "1 sat", "2 sats". */
export const sats = (n: number) => `${n.toLocaleString('en-US')} ${n === 1 ? 'sat' : 'sats'}`;

export const INTERVALS: Record<string, string> = { weekly: 'week', monthly: 'month', yearly: 'year' };

export const METHOD_LABELS: Record<string, string> = {
  lightning: 'Lightning',
  onchain: 'On-chain bitcoin',
  cardproc: 'Card',
  walletproc: 'Online wallet (PayPal)',
  nwc: 'Automatic payments from my wallet (Nostr Wallet Connect)',
};

/** A date as a person reads it, with the time in UTC (the service's dates are UTC). */
export function date(unix: number | null | undefined, withTime = false): string {
  if (!unix) return '—';
  return (
    new Intl.DateTimeFormat('en-GB', {
      dateStyle: 'long',
      ...(withTime ? { timeStyle: 'short' } : {}),
      timeZone: 'UTC',
    }).format(new Date(unix * 1000)) + (withTime ? ' UTC' : '')
  );
}

export function fiat(amount: number | null | undefined, currency: string | null | undefined): string | null {
  if (amount === null || amount === undefined || !currency) return null;
  try {
    return new Intl.NumberFormat('en-US', { style: 'currency', currency: currency.toUpperCase() }).format(amount);
  } catch {
    return `${amount} ${currency.toUpperCase()}`;
  }
}

/**
 * A read-only value with a copy button. Wrapped whole (a textarea as tall as its text), not a one-line
 * field: an address is checked by eye against the wallet's, and a field cut it at 360 px (found from outside).
 */
export function copyField(label: string, value: string, id: string): HTMLElement {
  // Rows for a phone where field-sizing is not supported (it sizes the field to its text where it is).
  const input = h('textarea', { id, readonly: true, class: 'mono copy-value', rows: Math.ceil(value.length / 32), spellcheck: 'false', autocomplete: 'off' });
  input.value = value;
  const button = h(
    'button',
    {
      type: 'button',
      class: 'secondary',
      onclick: async () => {
        try {
          await navigator.clipboard.writeText(value);
        } catch {
          input.select();
          document.execCommand('copy');
        }
        button.textContent = 'Copied';
        announce(`${label} copied`);
        window.setTimeout(() => (button.textContent = `Copy ${label.toLowerCase()}`), 2000);
      },
    },
    `Copy ${label.toLowerCase()}`,
  );
  return h('div', { class: 'copy' }, h('label', { for: id }, label), h('div', { class: 'copy-row' }, input, button));
}

/** What pays a payment: a checkout answer or an open portal payment. */
export interface Payable {
  payment_method: string;
  amount_sats: number;
  payment_request?: string | null;
  onchain_address?: string | null;
  bip21_uri?: string | null;
  checkout_url?: string | null;
  amount_fiat?: number | null;
  currency?: string | null;
  expires_at?: number | null;
}

/**
 * The QR code, copyable text and wallet link that pay a payment on its rail. `until`: what the hint says
 * instead of the invoice's own expiry when a fresh invoice follows it (a renewal's, in the portal).
 */
export function paymentView(p: Payable, idPrefix: string, until?: string): HTMLElement {
  const box = h('div', { class: 'payment' });
  if (p.payment_method === 'onchain' && p.onchain_address) {
    const uri = p.bip21_uri ?? `bitcoin:${p.onchain_address}`;
    box.append(
      h('p', {}, `Send ${sats(p.amount_sats)} (${(p.amount_sats / 1e8).toFixed(8)} BTC) to this bitcoin address.`),
      qrCode(uri, 'QR code of the bitcoin payment request'),
      copyField('Address', p.onchain_address, `${idPrefix}-address`),
      h('p', {}, h('a', { class: 'button', href: uri }, 'Open in a bitcoin wallet')),
    );
  } else if (p.payment_request) {
    const uri = `lightning:${p.payment_request}`;
    box.append(
      h('p', {}, `Pay ${sats(p.amount_sats)} with a Lightning wallet: scan the code, or copy the invoice.`),
      qrCode(`lightning:${p.payment_request.toUpperCase()}`, 'QR code of the Lightning invoice'),
      copyField('Invoice', p.payment_request, `${idPrefix}-invoice`),
      h('p', {}, h('a', { class: 'button', href: uri }, 'Open in a Lightning wallet')),
    );
  } else if (p.checkout_url) {
    const price = fiat(p.amount_fiat, p.currency);
    box.append(
      h(
        'p',
        {},
        `Pay ${price ? `${price} (${sats(p.amount_sats)})` : sats(p.amount_sats)} on the payment provider's page. This page notices the payment by itself.`,
      ),
      h(
        'p',
        {},
        h(
          'a',
          { class: 'button', href: p.checkout_url, target: '_blank', rel: 'noopener noreferrer' },
          p.payment_method === 'cardproc' ? 'Pay by card' : 'Pay with your online wallet',
          h('span', { class: 'visually-hidden' }, ' (opens in a new tab)'),
        ),
      ),
    );
  } else {
    box.append(h('p', {}, 'This payment cannot be paid from this page.'));
  }
  if (until) box.append(h('p', { class: 'hint' }, until));
  else if (p.expires_at) box.append(h('p', { class: 'hint' }, `Payable until ${date(p.expires_at, true)}.`));
  return box;
}

/**
 * A connection string's shape, checked before anything is sent: the service checks the wallet itself
 * (its relay and info event) on submit. Null when the shape is right, else what is wrong.
 */
export function nwcShapeError(s: string): string | null {
  const v = s.trim();
  if (!v) return 'Paste the connection string from your wallet.';
  if (!/^nostr\+walletconnect:\/\//i.test(v)) return 'A connection string starts with nostr+walletconnect://';
  const rest = v.replace(/^nostr\+walletconnect:\/\//i, '');
  const q = rest.indexOf('?');
  const pubkey = (q < 0 ? rest : rest.slice(0, q)).replace(/\/$/, '');
  const params = new URLSearchParams(q < 0 ? '' : rest.slice(q + 1));
  if (!/^[0-9a-f]{64}$/i.test(pubkey)) return 'The wallet key in the connection string must be 64 hexadecimal characters.';
  if (!params.get('relay')) return 'The connection string names no relay.';
  if (!/^[0-9a-f]{64}$/i.test(params.get('secret') ?? '')) return 'The connection string has no valid secret.';
  return null;
}

export const STATUS_LABELS: Record<string, string> = {
  pending: 'Waiting for the first payment',
  active: 'Active',
  paused: 'Paused',
  past_due: 'Payment overdue',
  payment_failed: 'Payment failed',
  cancelled: 'Cancelled',
  expired: 'Ended',
};
