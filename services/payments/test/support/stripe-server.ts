import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';
import { brokenBody, type Faults } from './http-fake.js';

/** A Checkout Session as Stripe answers it (the fields this project reads, plus the usual neighbours). */
export interface StripeSession {
  id: string;
  object: 'checkout.session';
  account: string | null;
  amount_subtotal: number;
  amount_total: number;
  client_reference_id: string | null;
  created: number;
  currency: string;
  expires_at: number;
  livemode: false;
  metadata: Record<string, string>;
  mode: 'payment';
  payment_intent: string | null;
  payment_status: 'paid' | 'unpaid' | 'no_payment_required';
  status: 'open' | 'complete' | 'expired';
  success_url: string;
  url: string | null;
  /** What was posted, as Stripe parsed it (bracket notation into objects and arrays). */
  params: Record<string, unknown>;
}

export interface StripeRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  raw: string;
  /** The form body, parsed like Stripe does. */
  form: Record<string, unknown>;
}

export interface StripeServer {
  url: string;
  secretKey: string;
  webhookSecret: string;
  requests: StripeRequest[];
  /** `body`: a 200 whose body stops coming (`stall`) or never ends (`endless`). */
  faults: Faults & { body?: 'stall' | 'endless' };
  sessions: Map<string, StripeSession>;
  /** Connected accounts the key may act on with `Stripe-Account`. */
  accounts: Set<string>;
  /** The payer paid: a PaymentIntent exists and the session is complete. `async` leaves it unpaid (a bank debit under way). */
  pay(id: string, opts?: { async?: boolean }): StripeSession;
  expire(id: string): StripeSession;
  /** The session as the API answers it. */
  sessionJson(id: string): Omit<StripeSession, 'account' | 'params'>;
  /** An event as Stripe sends it to an endpoint, as JSON text (what gets signed). */
  eventJson(type: string, sessionId: string, opts?: { id?: string; created?: number }): string;
  /** The `Stripe-Signature` header for `payload`, made by the SDK (another secret or time when given). */
  sign(payload: string, opts?: { secret?: string; timestamp?: number }): string;
  close(): Promise<void>;
}

const rid = (prefix: string, n = 24) => `${prefix}${randomBytes(n).toString('base64url').replace(/[-_]/g, '').slice(0, n)}`;
const mask = (key: string) => `${key.slice(0, 8)}${'*'.repeat(Math.max(0, key.length - 12))}${key.slice(-4)}`;

class StripeApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param?: string,
    readonly code?: string,
    readonly type = 'invalid_request_error',
  ) {
    super(message);
  }
}
const missing = (param: string) => new StripeApiError(400, `Missing required param: ${param}.`, param, 'parameter_missing');
const invalid = (param: string, message: string) => new StripeApiError(400, message, param, 'parameter_invalid_string');

/** `a[b][0][c]=v` into `{a: {b: [{c: 'v'}]}}`, as Stripe reads form bodies. */
function parseStripeForm(raw: string): Record<string, unknown> {
  const root: Record<string, unknown> = {};
  for (const [key, value] of new URLSearchParams(raw)) {
    const path = key.replace(/\]/g, '').split('[');
    let node: Record<string, unknown> = root;
    path.forEach((k, i) => {
      if (i === path.length - 1) node[k] = value;
      else node = (node[k] ??= {}) as Record<string, unknown>;
    });
  }
  const arrays = (v: unknown): unknown => {
    if (!v || typeof v !== 'object') return v;
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    const out = Object.fromEntries(keys.map((k) => [k, arrays(o[k])]));
    return keys.length && keys.every((k, i) => k === String(i)) ? keys.map((k) => out[k]) : out;
  };
  return arrays(root) as Record<string, unknown>;
}

const int = (v: unknown) => (typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : undefined);
const isObj = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);
/** Stripe's minimum charge per currency, in minor units (the common ones). */
const MINIMUM: Record<string, number> = { usd: 50, eur: 50, gbp: 30, chf: 50, cad: 50, aud: 50, jpy: 50 };
const SESSION_PARAMS = new Set([
  'mode',
  'line_items',
  'metadata',
  'client_reference_id',
  'success_url',
  'cancel_url',
  'expires_at',
  'customer_email',
  'payment_intent_data',
]);

/** Validates a Checkout Session create like Stripe does (the subset this project uses) and returns the session. */
function createSession(form: Record<string, unknown>, account: string | null, now: number): StripeSession {
  for (const k of Object.keys(form)) if (!SESSION_PARAMS.has(k)) throw new StripeApiError(400, `Received unknown parameter: ${k}`, k, 'parameter_unknown');
  if (form.mode === undefined) throw missing('mode');
  if (form.mode !== 'payment') throw invalid('mode', `Invalid mode: must be one of payment, setup, or subscription (this server only does payment)`);
  if (typeof form.success_url !== 'string') throw missing('success_url');
  if (!/^https?:\/\/[^\s]+$/.test(form.success_url)) throw invalid('success_url', 'Not a valid URL');
  if (!Array.isArray(form.line_items) || !form.line_items.length) throw missing('line_items');
  let total = 0;
  let currency: string | undefined;
  form.line_items.forEach((item, i) => {
    const p = `line_items[${i}]`;
    if (!isObj(item)) throw invalid(p, `Invalid object`);
    const q = int(item.quantity);
    if (q === undefined) throw missing(`${p}[quantity]`);
    if (q < 1) throw invalid(`${p}[quantity]`, 'This value must be greater than or equal to 1.');
    const pd = item.price_data;
    if (!isObj(pd)) throw new StripeApiError(400, `You must specify either \`price\` or \`price_data\` for each line item.`, p);
    if (typeof pd.currency !== 'string') throw missing(`${p}[price_data][currency]`);
    if (!/^[a-z]{3}$/.test(pd.currency)) throw invalid(`${p}[price_data][currency]`, `Invalid currency: ${pd.currency}.`);
    const amount = int(pd.unit_amount);
    if (pd.unit_amount === undefined) throw missing(`${p}[price_data][unit_amount]`);
    if (amount === undefined || amount < 0) throw invalid(`${p}[price_data][unit_amount]`, 'Invalid non-negative integer');
    if (!isObj(pd.product_data)) throw missing(`${p}[price_data][product_data]`);
    if (typeof pd.product_data.name !== 'string' || !pd.product_data.name.trim()) throw missing(`${p}[price_data][product_data][name]`);
    if (currency && currency !== pd.currency) throw invalid(`${p}[price_data][currency]`, 'All line items must use the same currency.');
    currency = pd.currency;
    total += amount * q;
  });
  const min = MINIMUM[currency!];
  if (min !== undefined && total < min) {
    throw new StripeApiError(
      400,
      `The Checkout Session's total amount due must add up to at least ${min} ${currency} (minor units).`,
      'line_items',
      'amount_too_small',
    );
  }
  const metadata = form.metadata ?? {};
  if (!isObj(metadata)) throw invalid('metadata', 'Invalid object');
  if (Object.keys(metadata).length > 50) throw invalid('metadata', 'You can specify up to 50 keys.');
  for (const [k, v] of Object.entries(metadata)) {
    if (k.length > 40) throw invalid(`metadata[${k}]`, 'Metadata keys can be at most 40 characters.');
    if (typeof v !== 'string' || v.length > 500) throw invalid(`metadata[${k}]`, 'Metadata values can be at most 500 characters.');
  }
  if (form.client_reference_id !== undefined && (typeof form.client_reference_id !== 'string' || form.client_reference_id.length > 200)) {
    throw invalid('client_reference_id', 'client_reference_id can be at most 200 characters.');
  }
  let expires = now + 86_400;
  if (form.expires_at !== undefined) {
    const e = int(form.expires_at);
    if (e === undefined) throw invalid('expires_at', 'Invalid integer');
    if (e < now + 1800) throw invalid('expires_at', 'The `expires_at` timestamp must be at least 30 minutes from Checkout Session creation.');
    if (e > now + 86_400) throw invalid('expires_at', 'The `expires_at` timestamp must be less than 24 hours from Checkout Session creation.');
    expires = e;
  }
  const id = rid('cs_test_a1', 56);
  return {
    id,
    object: 'checkout.session',
    account,
    amount_subtotal: total,
    amount_total: total,
    client_reference_id: (form.client_reference_id as string | undefined) ?? null,
    created: now,
    currency: currency!,
    expires_at: expires,
    livemode: false,
    metadata: metadata as Record<string, string>,
    mode: 'payment',
    payment_intent: null,
    payment_status: 'unpaid',
    status: 'open',
    success_url: form.success_url,
    url: `https://checkout.stripe.com/c/pay/${id}#${rid('', 40)}`,
    params: form,
  };
}

/**
 * Stripe's API wire format for Checkout Sessions: `POST /v1/checkout/sessions` (form-encoded, bracket
 * notation), `GET /v1/checkout/sessions/{id}` and `POST /v1/checkout/sessions/{id}/expire` (open sessions
 * only, as Stripe), Bearer auth with the secret key, `Stripe-Account` for
 * a connected account (a session is visible only on the account it was made on), errors as
 * `{"error": {type, message, param, code}}`. Events are built from the stored sessions and signed with
 * the SDK's own test signer.
 */
export async function startStripeServer(
  opts: { secretKey?: string; webhookSecret?: string; accounts?: string[]; nowS?: () => number } = {},
): Promise<StripeServer> {
  const secretKey = opts.secretKey ?? rid('sk_test_', 32);
  const webhookSecret = opts.webhookSecret ?? rid('whsec_', 32);
  const nowS = opts.nowS ?? (() => Math.floor(Date.now() / 1000));
  const sessions = new Map<string, StripeSession>();
  const accounts = new Set(opts.accounts ?? []);
  const requests: StripeRequest[] = [];
  const faults: StripeServer['faults'] = {};

  const get = (id: string) => {
    const s = sessions.get(id);
    if (!s) throw new Error(`no session ${id}`);
    return s;
  };
  const sessionJson = (id: string) => {
    const { account: _a, params: _p, ...json } = get(id);
    return json;
  };

  const expireSession = (s: StripeSession) => {
    s.status = 'expired';
    s.url = null;
    return s;
  };

  const handle = (req: StripeRequest): { status: number; body: unknown } => {
    const auth = req.headers.authorization ?? '';
    if (!auth.startsWith('Bearer ')) {
      throw new StripeApiError(
        401,
        "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
      );
    }
    const key = auth.slice(7);
    if (key !== secretKey) throw new StripeApiError(401, `Invalid API Key provided: ${mask(key)}`);
    const account = (req.headers['stripe-account'] as string | undefined) ?? null;
    if (account !== null && !accounts.has(account)) {
      throw new StripeApiError(
        403,
        `The provided key '${mask(key)}' does not have access to account '${account}' (or that account does not exist). Application access may have been revoked.`,
      );
    }
    if (req.method === 'POST' && req.path === '/v1/checkout/sessions') {
      if (!String(req.headers['content-type']).startsWith('application/x-www-form-urlencoded')) {
        throw new StripeApiError(400, 'Invalid request: the body must be application/x-www-form-urlencoded');
      }
      const s = createSession(req.form, account, nowS());
      sessions.set(s.id, s);
      return { status: 200, body: sessionJson(s.id) };
    }
    const m = /^\/v1\/checkout\/sessions\/([^/]+)$/.exec(req.path);
    if (req.method === 'GET' && m) {
      const s = sessions.get(decodeURIComponent(m[1]!));
      // Another account's session does not exist for this one.
      if (!s || s.account !== account) throw new StripeApiError(404, `No such checkout.session: '${decodeURIComponent(m[1]!)}'`, 'session', 'resource_missing');
      return { status: 200, body: sessionJson(s.id) };
    }
    const ex = /^\/v1\/checkout\/sessions\/([^/]+)\/expire$/.exec(req.path);
    if (req.method === 'POST' && ex) {
      const s = sessions.get(decodeURIComponent(ex[1]!));
      if (!s || s.account !== account)
        throw new StripeApiError(404, `No such checkout.session: '${decodeURIComponent(ex[1]!)}'`, 'session', 'resource_missing');
      if (s.status !== 'open')
        throw new StripeApiError(
          400,
          `Only Checkout Sessions with a status in ["open"] can be expired. This Checkout Session has a status of \`${s.status}\`.`,
        );
      expireSession(s);
      return { status: 200, body: sessionJson(s.id) };
    }
    throw new StripeApiError(404, `Unrecognized request URL (${req.method}: ${req.path}).`);
  };

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (raw += c));
    req.on('end', async () => {
      const [path, query] = (req.url ?? '/').split('?');
      const rec: StripeRequest = {
        method: req.method ?? 'GET',
        path: path!,
        headers: req.headers,
        raw,
        form: parseStripeForm(req.method === 'GET' ? (query ?? '') : raw),
      };
      requests.push(rec);
      if (faults.delayMs) await new Promise((r) => setTimeout(r, faults.delayMs));
      let out: { status: number; body: unknown };
      if (faults.status) {
        out = { status: faults.status, body: { error: { type: 'api_error', message: 'An unknown error occurred' } } };
      } else {
        try {
          out = handle(rec);
        } catch (err) {
          if (!(err instanceof StripeApiError)) throw err;
          out = {
            status: err.status,
            body: { error: { type: err.type, message: err.message, ...(err.param ? { param: err.param } : {}), ...(err.code ? { code: err.code } : {}) } },
          };
        }
      }
      if (res.destroyed) return;
      if (faults.body) return brokenBody(res, '{"id": "cs_test_', faults.body);
      res.writeHead(out.status, { 'content-type': 'application/json', 'request-id': rid('req_', 14) });
      res.end(JSON.stringify(out.body));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));

  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    secretKey,
    webhookSecret,
    requests,
    faults,
    sessions,
    accounts,
    pay(id, o = {}) {
      const s = get(id);
      s.status = 'complete';
      s.payment_intent ??= rid('pi_', 24);
      if (!o.async) s.payment_status = 'paid';
      return s;
    },
    expire: (id) => expireSession(get(id)),
    sessionJson,
    eventJson(type, sessionId, o = {}) {
      const s = get(sessionId);
      return JSON.stringify(
        {
          id: o.id ?? rid('evt_', 24),
          object: 'event',
          // Events of a connected account's objects name the account (Connect endpoints).
          ...(s.account ? { account: s.account } : {}),
          api_version: '2026-10-28.endive',
          created: o.created ?? nowS(),
          data: { object: sessionJson(sessionId) },
          livemode: false,
          pending_webhooks: 1,
          request: { id: null, idempotency_key: null },
          type,
        },
        null,
        2,
      );
    },
    sign(payload, o = {}) {
      return Stripe.webhooks.generateTestHeaderString({
        payload,
        secret: o.secret ?? webhookSecret,
        ...(o.timestamp !== undefined ? { timestamp: o.timestamp } : {}),
      });
    },
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
