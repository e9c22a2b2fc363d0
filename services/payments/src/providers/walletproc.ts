import { type Clock, type Logger, rejected, unixSeconds } from '@sb/runtime';
import type { CallbackOutcome, CallbackReader, PaymentLookup } from './callback.js';
import type { PaymentRecord } from '../domain/payments.js';
import { currencyExponent } from '../rates.js';
import { answerText, logProviderFailure, ProviderUnavailableError } from './http.js';
import type { PayerReturnUrl, ProviderStatus, Rail, RailRequest, Rails } from './rail.js';
import { secretSetting, urlSetting } from './http.js';

/**
 * Wallet processor: PayPal REST (OAuth2 client credentials, Orders v2, webhook verification), over plain
 * fetch. The order id is the payment's provider_ref; the order (read from PayPal) is the only truth about
 * whether it is paid.
 */

export interface PaypalSettings {
  /** REST base, e.g. https://api-m.paypal.com (live) or https://api-m.sandbox.paypal.com. */
  apiUrl: string;
  clientId: string;
  clientSecret: string;
  /** The id PayPal gave the webhook registered for /public/webhook/walletproc: its signatures are verified against it. */
  webhookId: string;
  timeoutMs: number;
  /** Where PayPal sends the payer after approving or cancelling; PayPal appends `token` (the order id) and `PayerID`. */
  returnUrl: PayerReturnUrl;
}

interface PaypalAmount {
  currency_code?: string;
  value?: string;
}

/** The order as PayPal answers it; only what this service reads. */
interface PaypalOrder {
  id: string;
  status: 'CREATED' | 'SAVED' | 'APPROVED' | 'VOIDED' | 'COMPLETED' | 'PAYER_ACTION_REQUIRED' | string;
  purchase_units?: {
    custom_id?: string;
    amount?: PaypalAmount;
    payments?: { captures?: { id: string; status: string; amount?: PaypalAmount }[] };
  }[];
  links?: { href: string; rel: string; method?: string }[];
}

/** The PAYPAL-* headers of a webhook delivery (lower-cased names, as the gateway passes them). */
const TRANSMISSION_HEADERS = {
  auth_algo: 'paypal-auth-algo',
  cert_url: 'paypal-cert-url',
  transmission_id: 'paypal-transmission-id',
  transmission_sig: 'paypal-transmission-sig',
  transmission_time: 'paypal-transmission-time',
} as const;
type Transmission = Record<keyof typeof TRANSMISSION_HEADERS, string>;

/** The transmission fields of a delivery, or undefined when one is missing. */
export function transmissionOf(headers: Record<string, string>): Transmission | undefined {
  const t: Partial<Transmission> = {};
  for (const [field, header] of Object.entries(TRANSMISSION_HEADERS) as [keyof Transmission, string][]) {
    const v = headers[header];
    if (!v) return undefined;
    t[field] = v;
  }
  return t as Transmission;
}

// PayPal refuses decimals for these, though ISO 4217 gives them two (https://developer.paypal.com/reference/currency-codes/).
const PAYPAL_WHOLE = new Set(['HUF', 'TWD']);

/** An amount as PayPal's `value` string: as many decimals as PayPal takes for the currency, at least one unit of the last. */
function paypalValue(amount: number, currency: string): string {
  const decimals = PAYPAL_WHOLE.has(currency.toUpperCase()) ? 0 : currencyExponent(currency);
  return Math.max(amount, 10 ** -decimals).toFixed(decimals);
}

// Capture statuses that mean the money will never come (DENIED is what the webhook event is named after).
const CAPTURE_FAILED = new Set(['DECLINED', 'DENIED', 'FAILED']);

/**
 * Why a completed capture does not pay `p`: PayPal captured less than the fiat amount recorded on the
 * payment, or in another currency; undefined when it captured at least that much in it (more is paid, as
 * a card's: see cardproc's amountMismatch).
 */
function amountMismatch(got: PaypalAmount | undefined, p: Pick<PaymentRecord, 'amount_fiat' | 'currency'>): string | undefined {
  if (p.amount_fiat === null || !p.currency) return 'paypal: the payment has no fiat amount to compare';
  const want = { currency_code: p.currency.toUpperCase(), value: paypalValue(p.amount_fiat, p.currency) };
  const enough = got?.currency_code?.toUpperCase() === want.currency_code && Number(got.value) >= Number(want.value);
  return enough ? undefined : `paypal: captured ${got?.value} ${got?.currency_code}, the payment is ${want.value} ${want.currency_code}`;
}

/**
 * What an order says about its payment `p`: paid once its capture completed for the payment's own amount
 * and currency, failed when it was declined or voided.
 */
function orderStatus(order: PaypalOrder, p: Pick<PaymentRecord, 'amount_fiat' | 'currency'>): ProviderStatus {
  if (order.status === 'VOIDED') return { paid: false, failed: true };
  const unit = order.purchase_units?.[0];
  const capture = unit?.payments?.captures?.[0];
  if (order.status === 'COMPLETED' && capture?.status === 'COMPLETED') {
    const mismatch = amountMismatch(capture.amount ?? unit?.amount, p);
    return mismatch ? { paid: false, mismatch } : { paid: true };
  }
  if (capture && CAPTURE_FAILED.has(capture.status)) return { paid: false, failed: true };
  return { paid: false };
}

interface ApiAnswer {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: PayPal's JSON, read field by field.
  body: any;
}

/** PayPal's error `details[].issue` codes of an answer. */
const issuesOf = (a: ApiAnswer): string[] => (Array.isArray(a.body?.details) ? a.body.details.map((d: { issue?: unknown }) => String(d?.issue)) : []);

// The token is renewed this long before PayPal says it expires, so no call goes out with a token about to lapse.
const TOKEN_MARGIN_S = 60;

export class PaypalClient {
  private token?: { value: string; renewAtMs: number };
  private renewing?: Promise<string>;

  constructor(
    private readonly s: PaypalSettings,
    /** Real time, not the service's (possibly test) clock: token lifetimes are PayPal's. */
    private readonly nowMs: () => number = Date.now,
  ) {}

  /** The cached token, or a fresh one; concurrent callers share one token request. */
  private accessToken(): Promise<string> {
    if (this.token && this.nowMs() < this.token.renewAtMs) return Promise.resolve(this.token.value);
    return this.renewToken();
  }

  private renewToken(): Promise<string> {
    this.renewing ??= this.fetchToken().finally(() => (this.renewing = undefined));
    return this.renewing;
  }

  private async fetchToken(): Promise<string> {
    const basic = Buffer.from(`${this.s.clientId}:${this.s.clientSecret}`).toString('base64');
    const a = await this.send(
      'POST',
      '/v1/oauth2/token',
      {
        authorization: `Basic ${basic}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      'grant_type=client_credentials',
    );
    // The token answer is never quoted in a reason: it holds the token.
    if (a.status !== 200) throw new ProviderUnavailableError(`paypal POST /v1/oauth2/token: HTTP ${a.status} ${String(a.body?.error ?? '')}`);
    const value = a.body?.access_token;
    const expiresIn = a.body?.expires_in;
    if (typeof value !== 'string' || !value || typeof expiresIn !== 'number') {
      throw new ProviderUnavailableError('paypal POST /v1/oauth2/token: answer lacks access_token or expires_in');
    }
    this.token = { value, renewAtMs: this.nowMs() + Math.max(0, expiresIn - Math.min(TOKEN_MARGIN_S, expiresIn / 2)) * 1000 };
    return value;
  }

  /** One HTTP exchange with a deadline; a network failure or timeout is ProviderUnavailableError. */
  private async send(method: 'GET' | 'POST', path: string, headers: Record<string, string>, body?: string): Promise<ApiAnswer> {
    let res: Response;
    try {
      res = await fetch(`${this.s.apiUrl}${path}`, {
        method,
        headers: { accept: 'application/json', ...headers },
        body,
        signal: AbortSignal.timeout(this.s.timeoutMs),
      });
    } catch (err) {
      const e = err as Error;
      throw new ProviderUnavailableError(`paypal ${method} ${path}: ${e.name === 'TimeoutError' ? `no answer within ${this.s.timeoutMs} ms` : e.message}`);
    }
    // Bounded, and a body that stops coming is PayPal unavailable (found from outside: read as an empty
    // answer, a stalled verification was "not verified", 400; an endless one was read to 1.2 GB).
    const text = await answerText(res, `paypal ${method} ${path}`);
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      if (res.ok) throw new ProviderUnavailableError(`paypal ${method} ${path}: answer is not JSON`);
    }
    return { status: res.status, body: parsed };
  }

  /**
   * A REST call with the bearer token. A 401 means PayPal no longer takes the token (revoked, or it
   * expired early): one fresh token, one retry. Answers are returned whatever their status.
   */
  private async api(method: 'GET' | 'POST', path: string, opts: { json?: string; requestId?: string; prefer?: string } = {}): Promise<ApiAnswer> {
    const call = (token: string) =>
      this.send(
        method,
        path,
        {
          authorization: `Bearer ${token}`,
          ...(opts.json !== undefined ? { 'content-type': 'application/json' } : {}),
          ...(opts.requestId ? { 'paypal-request-id': opts.requestId } : {}),
          ...(opts.prefer ? { prefer: opts.prefer } : {}),
        },
        opts.json,
      );
    const token = await this.accessToken();
    const a = await call(token);
    if (a.status !== 401) return a;
    // Dropped only if still cached: a call that failed alongside may already have renewed it.
    if (this.token?.value === token) this.token = undefined;
    return call(await this.accessToken());
  }

  private unavailable(method: string, path: string, a: ApiAnswer): ProviderUnavailableError {
    const what = [a.body?.name, ...issuesOf(a), a.body?.debug_id && `debug_id ${a.body.debug_id}`].filter(Boolean).join(' ');
    return new ProviderUnavailableError(`paypal ${method} ${path}: HTTP ${a.status} ${what}`.trim());
  }

  private orderOf(method: string, path: string, a: ApiAnswer, id?: string): PaypalOrder {
    if (a.status < 200 || a.status > 299) throw this.unavailable(method, path, a);
    const o = a.body as PaypalOrder | undefined;
    if (typeof o?.id !== 'string' || typeof o.status !== 'string' || (id !== undefined && o.id !== id)) {
      throw new ProviderUnavailableError(`paypal ${method} ${path}: answer is not the order`);
    }
    return o;
  }

  /**
   * Creates the order of a payment. `PayPal-Request-Id` is the payment id, so a retried create answers the
   * same order instead of making a second one.
   */
  async createOrder(req: RailRequest): Promise<{ order: PaypalOrder; approveUrl: string }> {
    if (!req.fiat) throw new Error('a wallet-processor payment needs its fiat quote');
    const unit: Record<string, unknown> = {
      reference_id: req.subscription_id,
      custom_id: req.payment_id,
      // Shown in the merchant's PayPal records, so a payment is found there by its id.
      invoice_id: req.payment_id,
      description: req.memo.slice(0, 127),
      amount: { currency_code: req.fiat.currency.toUpperCase(), value: paypalValue(req.fiat.amount, req.fiat.currency) },
      ...(req.plan.walletproc_merchant_id ? { payee: { merchant_id: req.plan.walletproc_merchant_id } } : {}),
    };
    const body = {
      intent: 'CAPTURE',
      purchase_units: [unit],
      payment_source: {
        paypal: {
          experience_context: {
            return_url: this.s.returnUrl(req),
            cancel_url: this.s.returnUrl(req),
            user_action: 'PAY_NOW',
            // Subscriptions ship nothing.
            shipping_preference: 'NO_SHIPPING',
          },
        },
      },
    };
    const path = '/v2/checkout/orders';
    const order = this.orderOf('POST', path, await this.api('POST', path, { json: JSON.stringify(body), requestId: req.payment_id }));
    // `payer-action` with payment_source.paypal.experience_context; `approve` in the older application_context flow.
    const approveUrl = order.links?.find((l) => l.rel === 'payer-action' || l.rel === 'approve')?.href;
    if (!approveUrl) throw new ProviderUnavailableError(`paypal POST ${path}: answer has no approve link`);
    return { order, approveUrl };
  }

  async getOrder(id: string): Promise<PaypalOrder> {
    const path = `/v2/checkout/orders/${encodeURIComponent(id)}`;
    return this.orderOf('GET', path, await this.api('GET', path), id);
  }

  /**
   * Captures an approved order. Idempotent twice over: the same `PayPal-Request-Id` answers the first
   * capture again, and an order captured by an earlier call (ORDER_ALREADY_CAPTURED) is read instead.
   * A declined funding source (INSTRUMENT_DECLINED) leaves the order to the payer, so it is read too.
   * PayPal answers without the captured amount unless asked for the full representation, and the amount
   * is what decides whether the capture pays the payment: asked for, and read from the order if still absent.
   */
  async capture(id: string): Promise<PaypalOrder> {
    const path = `/v2/checkout/orders/${encodeURIComponent(id)}/capture`;
    const a = await this.api('POST', path, { json: '{}', requestId: `capture-${id}`, prefer: 'return=representation' });
    if (a.status === 422 && issuesOf(a).some((i) => i === 'ORDER_ALREADY_CAPTURED' || i === 'INSTRUMENT_DECLINED')) return this.getOrder(id);
    const order = this.orderOf('POST', path, a, id);
    const unit = order.purchase_units?.[0];
    return (unit?.payments?.captures?.[0]?.amount ?? unit?.amount) ? order : this.getOrder(id);
  }

  /**
   * What PayPal says about the order of payment `p`. An approved order is captured first (nobody else
   * will), but only when `capture` allows: capturing takes the payer's money.
   */
  async status(p: Pick<PaymentRecord, 'provider_ref' | 'amount_fiat' | 'currency'>, capture: boolean): Promise<ProviderStatus> {
    const id = p.provider_ref!;
    const order = await this.getOrder(id);
    return orderStatus(order.status === 'APPROVED' && capture ? await this.capture(id) : order, p);
  }

  /**
   * Asks PayPal whether a webhook delivery is genuine. `rawEvent` must be the exact body received (a JSON
   * object): it is spliced in verbatim, because PayPal checks the signature over the bytes it sent and a
   * re-serialised event may differ from them.
   */
  async verifyWebhook(t: Transmission, rawEvent: string): Promise<boolean> {
    const head = JSON.stringify({ ...t, webhook_id: this.s.webhookId });
    const path = '/v1/notifications/verify-webhook-signature';
    const a = await this.api('POST', path, { json: `${head.slice(0, -1)},"webhook_event":${rawEvent}}` });
    if (a.status !== 200) throw this.unavailable('POST', path, a);
    return a.body?.verification_status === 'SUCCESS';
  }
}

interface PaypalRail extends Rail {
  readonly paypal: PaypalClient;
}

export function paypalRail(paypal: PaypalClient, clock: Clock): PaypalRail {
  return {
    method: 'walletproc',
    provider: 'paypal',
    needsFiat: true,
    paypal,
    async open(req) {
      const { order, approveUrl } = await paypal.createOrder(req);
      return { provider_ref: order.id, walletproc_order_id: order.id, checkout_url: approveUrl, expires_at: unixSeconds(clock) + req.expiry_seconds };
    },
    // A payment we expired (cancelled, plan archived, renewal replaced) must not be charged: its approved
    // order stays uncaptured and PayPal voids it when the authorization window ends.
    status: (p: PaymentRecord) => paypal.status(p, p.status === 'pending'),
  };
}

/** The PayPal client of this deployment's wallet-processor rail, when it is PayPal. */
function paypalOf(rails: Rails): PaypalClient | undefined {
  const r = rails.walletproc;
  return r?.provider === 'paypal' ? (r as PaypalRail).paypal : undefined;
}

interface WebhookEvent {
  id: string;
  event_type: string;
  // biome-ignore lint/suspicious/noExplicitAny: PayPal's resource, read field by field below.
  resource: Record<string, any>;
}

function eventOf(raw: string): WebhookEvent | undefined {
  let e: unknown;
  try {
    e = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (!e || typeof e !== 'object' || Array.isArray(e)) return undefined;
  const o = e as Partial<WebhookEvent>;
  const ok = typeof o.id === 'string' && o.id !== '' && typeof o.event_type === 'string' && !!o.resource && typeof o.resource === 'object';
  return ok ? (o as WebhookEvent) : undefined;
}

const HANDLED = new Set(['CHECKOUT.ORDER.APPROVED', 'PAYMENT.CAPTURE.COMPLETED', 'PAYMENT.CAPTURE.DENIED']);

/** The payment a (verified) event is about; undefined when it is not one of ours. */
async function paymentOf(payments: PaymentLookup, e: WebhookEvent): Promise<PaymentRecord | undefined> {
  if (e.event_type === 'CHECKOUT.ORDER.APPROVED') {
    const order = e.resource as PaypalOrder;
    const p = typeof order.id === 'string' ? await payments.byProviderRef('paypal', order.id) : undefined;
    return p && order.purchase_units?.[0]?.custom_id === p.id ? p : undefined;
  }
  // Capture events name the payment (custom_id) and the order; both must agree with what we stored.
  const orderId = e.resource.supplementary_data?.related_ids?.order_id;
  const p = typeof e.resource.custom_id === 'string' ? await payments.getById(e.resource.custom_id) : undefined;
  return p && p.provider === 'paypal' && typeof orderId === 'string' && p.provider_ref === orderId ? p : undefined;
}

/**
 * PayPal webhook deliveries (`/public/webhook/walletproc`): each is verified by PayPal itself
 * (verify-webhook-signature with this deployment's webhook id) before anything is read from it; an
 * unverifiable or malformed one is refused, and a PayPal that cannot be asked is 503 (PayPal delivers again).
 */
export function paypalCallbacks(rails: Rails, payments: PaymentLookup, log: Logger): CallbackReader {
  const paypal = paypalOf(rails);
  if (!paypal) throw new Error('the PayPal callback reader needs the PayPal rail');
  return {
    provider: 'paypal',
    async read(body) {
      const transmission = transmissionOf(body.headers);
      const raw = Buffer.from(body.raw, 'base64').toString('utf8');
      const event = eventOf(raw);
      if (!transmission || !event) throw rejected('Invalid callback');
      const genuine = await logProviderFailure(log, { provider: 'paypal', event_id: event.id }, () => paypal.verifyWebhook(transmission, raw));
      if (!genuine) throw rejected('Invalid callback');
      if (!HANDLED.has(event.event_type)) return null;
      const payment = await paymentOf(payments, event);
      if (!payment) return null;
      return { payment, eventId: event.id, label: event.event_type, outcome: () => outcomeOf(paypal, event, payment, log) };
    },
  };
}

/** What the event says happened, after any PayPal call it needs (so none runs inside the transaction). */
async function outcomeOf(paypal: PaypalClient, e: WebhookEvent, p: PaymentRecord, log: Logger): Promise<CallbackOutcome> {
  const ask = (call: () => Promise<PaypalOrder>) => logProviderFailure(log, { payment_id: p.id, provider: 'paypal' }, call);
  switch (e.event_type) {
    case 'CHECKOUT.ORDER.APPROVED': {
      // Approved is not paid: the money moves only when we capture (idempotent, so redeliveries are safe).
      // Only an open payment is captured: one we expired (cancelled, replaced) must not take the payer's
      // money; PayPal voids the uncaptured order when its authorization window ends.
      if (p.status !== 'pending') {
        if (p.status === 'expired') log.info({ payment_id: p.id, provider: 'paypal', event_id: e.id }, 'approved order of an expired payment left uncaptured');
        return { nothing: true };
      }
      return outcomeOfStatus(orderStatus(await ask(() => paypal.capture(p.provider_ref!)), p), e);
    }
    default: {
      // PAYMENT.CAPTURE.COMPLETED / DENIED: the event is genuine, but only the order as PayPal answers it
      // now says what was captured, and for how much (as the charge server's charge is read again).
      return outcomeOfStatus(orderStatus(await ask(() => paypal.getOrder(p.provider_ref!)), p), e);
    }
  }
}

function outcomeOfStatus(s: ProviderStatus, e: WebhookEvent): CallbackOutcome {
  return s.paid ? { paid: true } : s.failed ? { failed: `paypal: ${e.event_type}` } : { nothing: true, warning: s.mismatch };
}

/** PayPal (WALLETPROC_PROVIDER=paypal): its settings, gathered into the payments configuration by the registry. */
export const paypalSettings = {
  /** Wallet processor (WALLETPROC_PROVIDER=paypal): REST app credentials and the id of the webhook registered for /public/webhook/walletproc. */
  PAYPAL_CLIENT_ID: secretSetting.optional(),
  PAYPAL_CLIENT_SECRET: secretSetting.optional(),
  PAYPAL_WEBHOOK_ID: secretSetting.optional(),
  /** PayPal's REST base: live by default; https://api-m.sandbox.paypal.com for the sandbox. */
  PAYPAL_API_URL: urlSetting.default('https://api-m.paypal.com'),
};
