import Stripe from 'stripe';
import { checkoutPageUrl } from '@sb/contracts';
import { systemClock, unixSeconds, type Clock, type DomainError, invalid, rejected } from '@sb/runtime';
import type { PaymentRecord } from '../domain/payments.js';
import { currencyExponent } from '../rates.js';
import { boundedFetch, ProviderUnavailableError } from './http.js';
import type { OpenedPayment, ProviderStatus, Rail, RailRequest, Rails } from './rail.js';
import type { CallbackOutcome, CallbackReader, PaymentLookup } from './callback.js';
import { secretSetting, urlSetting } from './http.js';

interface StripeSettings {
  secretKey: string;
  /** Signing secret of the webhook endpoint (`whsec_...`). */
  webhookSecret: string;
  /** Unset: Stripe's own API. */
  apiUrl?: string;
  /** Where the payer is sent back to after paying. */
  publicBaseUrl: string;
  timeoutMs: number;
}

/** Stripe's bounds on a Checkout Session's `expires_at`, counted from its creation. */
const MIN_EXPIRY_S = 30 * 60;
const MAX_EXPIRY_S = 24 * 3600;
/** Stripe counts from its own clock; this margin keeps a small skew from pushing us out of its bounds. */
const SKEW_S = 60;
/** Signed events older than this are refused (replays). */
const WEBHOOK_TOLERANCE_S = 300;

/**
 * An amount in the smallest unit Stripe charges in for `currency`; three-decimal amounts must end in 0.
 * The session is made from the quote (3 decimals for KWD and the like) and checked against the stored
 * `amount_fiat`, which keeps cents rounded half away from zero: both must come out the same here. So the
 * amount is first taken in exact minor units, then rounded to cents as the column rounds (4.185 KWD is
 * stored 4.19: 4190, not the 4180 a float `4.185 * 100` rounds to).
 */
export function stripeUnitAmount(amount: number, currency: string): number {
  const exponent = currencyExponent(currency);
  if (exponent === 0) return Math.max(1, Math.round(amount));
  const minor = Math.round(amount * 10 ** exponent);
  const cents = Math.max(1, exponent === 3 ? Math.round(minor / 10) : minor);
  return exponent === 3 ? cents * 10 : cents;
}

/** The payer's words for a price under the card processor's minimum charge. */
function tooSmall(fiat: { amount: number; currency: string }, purpose: string): string {
  const price = `${fiat.amount.toFixed(currencyExponent(fiat.currency) === 0 ? 0 : 2)} ${fiat.currency.toUpperCase()}`;
  // A renewal's refusal is said to the owner (the subscriber cannot change the method of a subscription):
  // no advice meant for a payer at the checkout (found in review: "Choose another payment method" in the owner's mail).
  if (purpose === 'renewal') return `The renewal's price, ${price} at today's rate, is below the smallest amount the card processor takes`;
  return `This plan cannot be paid by card: its price, ${price} at today's rate, is below the smallest amount the card processor takes. Choose another payment method`;
}

/**
 * What the payment row keeps as `provider_ref`: the session id, prefixed with the connected account
 * (`acct_.../cs_...`) when the session lives there, since it can only be read back on that account.
 */
function sessionRef(sessionId: string, account?: string | null): string {
  return account ? `${account}/${sessionId}` : sessionId;
}

function parseRef(ref: string): { sessionId: string; account?: string } {
  const i = ref.indexOf('/');
  return i < 0 ? { sessionId: ref } : { account: ref.slice(0, i), sessionId: ref.slice(i + 1) };
}

type StripeEvent = Stripe.Event;
type CheckoutSession = Awaited<ReturnType<Stripe['checkout']['sessions']['retrieve']>>;

/**
 * The card processor rail over Stripe Checkout: one Checkout Session per payment (mode=payment, one
 * line item priced in the deployment's fiat), on the plan's connected account when it names one. The
 * session's `metadata.payment_id` carries our id back in its events.
 */
export class StripeCardRail implements Rail {
  readonly method = 'cardproc' as const;
  readonly provider = 'stripe' as const;
  readonly needsFiat = true;
  private readonly stripe: Stripe;

  constructor(
    private readonly s: StripeSettings,
    private readonly clock: Clock,
    /** Stripe's time: session expiry bounds and signature age are wall-clock, whatever the DEV_MODE test clock says. */
    private readonly wall: Clock = systemClock,
  ) {
    const api = s.apiUrl ? new URL(s.apiUrl) : undefined;
    this.stripe = new Stripe(s.secretKey, {
      timeout: s.timeoutMs,
      // A retry would outlast the caller's deadline; the caller (billing, the sweeper) asks again instead.
      maxNetworkRetries: 0,
      telemetry: false,
      // Answers read as every other provider's: at most 1 MiB, and the timeout covers the whole body (the
      // SDK's own Node client reads any length, its timeout restarting at each stage).
      httpClient: Stripe.createFetchHttpClient(boundedFetch),
      ...(api ? { host: api.hostname, port: api.port || (api.protocol === 'https:' ? 443 : 80), protocol: api.protocol === 'https:' ? 'https' : 'http' } : {}),
    });
  }

  async open(req: RailRequest): Promise<OpenedPayment> {
    if (!req.fiat) throw new Error('the card rail needs a fiat quote');
    const life = Math.min(Math.max(req.expiry_seconds, MIN_EXPIRY_S + SKEW_S), MAX_EXPIRY_S - SKEW_S);
    // Stripe bounds `expires_at` by its own (wall) clock; our record follows this service's clock, shifted
    // by whole seconds and read before the call, so that without a test clock both say the same second.
    const expiresAt = unixSeconds(this.wall) + life;
    const recordExpiresAt = expiresAt + Math.round((this.clock.nowMs() - this.wall.nowMs()) / 1000);
    const account = req.plan.cardproc_account_id || undefined;
    // The checkout page following this payment, paid or not: the payer sees it confirmed there (pending until the event arrives).
    const back = checkoutPageUrl(this.s.publicBaseUrl, req.plan_id, req.payment_id);
    const session = await this.call(
      'POST /v1/checkout/sessions',
      () =>
        this.stripe.checkout.sessions.create(
          {
            mode: 'payment',
            line_items: [
              {
                quantity: 1,
                price_data: {
                  currency: req.fiat!.currency,
                  unit_amount: stripeUnitAmount(req.fiat!.amount, req.fiat!.currency),
                  product_data: { name: req.memo },
                },
              },
            ],
            metadata: { payment_id: req.payment_id, subscription_id: req.subscription_id },
            client_reference_id: req.payment_id,
            success_url: back,
            cancel_url: back,
            expires_at: expiresAt,
          },
          account ? { stripeAccount: account } : undefined,
        ),
      // Below Stripe's minimum charge (0.50 USD or EUR, 0.30 GBP, ...): no retry helps (found from outside:
      // a 503 "try again shortly" for a plan of a few hundred sats), another method does.
      (e) => (e.code === 'amount_too_small' ? invalid(['payment_method'], tooSmall(req.fiat!, req.purpose)) : undefined),
    );
    if (!session.url) throw new ProviderUnavailableError(`stripe POST /v1/checkout/sessions: session ${session.id} has no url`);
    return { provider_ref: sessionRef(session.id, account), checkout_url: session.url, expires_at: recordExpiresAt };
  }

  /**
   * Paid when Stripe says so for the payment's own amount and currency; never failed from a poll (a
   * declined card can be retried on the same session).
   */
  async status(p: PaymentRecord): Promise<ProviderStatus> {
    const { sessionId, account } = parseRef(p.provider_ref!);
    const session = await this.call('GET /v1/checkout/sessions/{id}', () =>
      this.stripe.checkout.sessions.retrieve(sessionId, {}, account ? { stripeAccount: account } : undefined),
    );
    if (session.payment_status !== 'paid') return { paid: false };
    const mismatch = amountMismatch(session, p);
    return mismatch ? { paid: false, mismatch } : { paid: true, ...paymentIntentOf(session) };
  }

  /**
   * Expires the session at Stripe, so the payer can no longer pay it. A session that is no longer open
   * (paid, or expired already) is left as it is: Stripe refuses to expire it, and reading it tells why.
   */
  async cancel(p: PaymentRecord): Promise<void> {
    const { sessionId, account } = parseRef(p.provider_ref!);
    const on = account ? { stripeAccount: account } : undefined;
    try {
      await this.call('POST /v1/checkout/sessions/{id}/expire', () => this.stripe.checkout.sessions.expire(sessionId, {}, on));
    } catch (err) {
      const session = await this.stripe.checkout.sessions.retrieve(sessionId, {}, on).catch(() => undefined);
      if (!session || session.status === 'open') throw err;
    }
  }

  /**
   * The event of a webhook delivery, verified against the endpoint secret on the exact bytes; anything
   * else is 400, a signed body that is not an event (`null`, a list, no string id and type) included, as
   * PayPal's and the charge server's malformed callbacks are.
   */
  verifyEvent(raw: Buffer, signature: string | undefined): StripeEvent {
    if (!signature) throw rejected('Invalid callback');
    // Stripe's check refuses only old timestamps; one from the future is refused the same way, so a
    // signature leaked with a far-future timestamp cannot be replayed for as long as it says.
    // Exactly one timestamp: with several, Stripe's check takes the last and this one must see the same.
    const ts = signature.split(',').filter((part) => /^\s*t=/.test(part));
    const t = ts.length === 1 ? Number(/^\s*t=(\d{1,12})\s*$/.exec(ts[0]!)?.[1]) : NaN;
    if (!Number.isFinite(t) || t > this.wall.nowMs() / 1000 + WEBHOOK_TOLERANCE_S) throw rejected('Invalid callback');
    // Several secrets: the platform endpoint's and a Connect endpoint's sign differently.
    for (const secret of this.s.webhookSecret
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean)) {
      let event: unknown;
      try {
        event = this.stripe.webhooks.constructEvent(raw, signature, secret, WEBHOOK_TOLERANCE_S, undefined, this.wall.nowMs());
      } catch {
        continue; // try the next secret
      }
      if (!isEvent(event)) break;
      return event;
    }
    throw rejected('Invalid callback');
  }

  /** `refused`: Stripe's answers that are the caller's to hear (a 4xx of its own), not an outage. */
  private async call<T>(what: string, fn: () => Promise<T>, refused?: (e: Partial<Stripe.errors.StripeError>) => DomainError | undefined): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      // Stripe's messages mask keys (`sk_test_****1234`), so the reason can be logged as it is.
      const e = err as Error & Partial<Pick<Stripe.errors.StripeError, 'statusCode' | 'type' | 'code' | 'detail'>>;
      const own = refused?.(e);
      if (own) throw own;
      const status = e.statusCode ? `HTTP ${e.statusCode} ` : '';
      // A connection error's own message says nothing of why; the error under it says more (a body not read).
      const why = e.detail instanceof Error ? ` (${e.detail.message})` : '';
      throw new ProviderUnavailableError(`stripe ${what}: ${status}${e.type ?? e.name}: ${e.message}${why}`.slice(0, 500));
    }
  }
}

/** Shaped as a Stripe event as far as the reader relies on it: an object with a string id and type. */
function isEvent(e: unknown): e is StripeEvent {
  const o = e as Partial<StripeEvent> | null;
  return !!o && typeof o === 'object' && !Array.isArray(o) && typeof o.id === 'string' && typeof o.type === 'string';
}

/** The PaymentIntent of a paid session, which is what Stripe's dashboard and refunds go by. */
function paymentIntentOf(session: Pick<CheckoutSession, 'payment_intent'>): { cardproc_payment_id?: string } {
  const pi = session.payment_intent;
  const id = typeof pi === 'string' ? pi : pi?.id;
  return id ? { cardproc_payment_id: id } : {};
}

/**
 * Why a paid session does not pay `p`: Stripe charged less than the fiat amount recorded on the payment,
 * or in another currency (a session changed at Stripe, or one made for another price); undefined when it
 * charged at least that much in it. More is paid, as on-chain (behaviour.md: underpayment leaves it
 * pending): the money was taken, and a payment left pending beside it helped nobody (found from outside).
 */
function amountMismatch(s: Pick<CheckoutSession, 'amount_total' | 'currency'>, p: Pick<PaymentRecord, 'amount_fiat' | 'currency'>): string | undefined {
  if (p.amount_fiat === null || !p.currency) return 'stripe: the payment has no fiat amount to compare';
  const want = stripeUnitAmount(p.amount_fiat, p.currency);
  // Read from a signed event, yet shaped by whoever signed it: a currency that is not a string is a
  // mismatch, never a TypeError (found from outside: a 500 Stripe would retry for days).
  const currency: unknown = s.currency;
  if (typeof s.amount_total === 'number' && s.amount_total >= want && typeof currency === 'string' && currency.toLowerCase() === p.currency.toLowerCase())
    return undefined;
  const shown = (v: unknown) => (typeof v === 'string' || typeof v === 'number' ? v : JSON.stringify(v));
  return `stripe: the session charged ${shown(s.amount_total)} ${shown(currency)}, the payment is ${want} ${p.currency} (minor units)`;
}

/** Paid, if the session charged what the payment records. */
function paidOutcome(s: CheckoutSession, p: PaymentRecord): CallbackOutcome {
  const mismatch = amountMismatch(s, p);
  return mismatch ? { nothing: true, warning: mismatch } : { paid: true, details: paymentIntentOf(s) };
}

/** What each Checkout Session event says happened to its payment. */
const SESSION_OUTCOMES: Record<string, (s: CheckoutSession, p: PaymentRecord) => CallbackOutcome> = {
  // 'unpaid' here is a delayed method (bank debit): its outcome comes as async_payment_succeeded / _failed.
  'checkout.session.completed': (s, p) => (s.payment_status === 'paid' ? paidOutcome(s, p) : { nothing: true }),
  'checkout.session.async_payment_succeeded': (s, p) => paidOutcome(s, p),
  'checkout.session.async_payment_failed': () => ({ failed: 'stripe: the payment method failed (async_payment_failed)' }),
  'checkout.session.expired': () => ({ expired: true }),
};

/**
 * Stripe's webhook (`/public/webhook/cardproc`): the event is verified (Stripe-Signature over the exact
 * bytes, 300 s tolerance) before anything is read from it. It acts only on one of our sessions, named by
 * `metadata.payment_id` and the session id we stored (a connected account's events carry `account`,
 * part of that reference); anything else is acknowledged and changes nothing.
 */
export function stripeCallbacks(rails: Rails, payments: PaymentLookup): CallbackReader {
  const rail = rails.cardproc;
  if (!(rail instanceof StripeCardRail)) throw new Error('the Stripe callback reader needs the Stripe card rail');
  return {
    provider: 'stripe',
    async read(body) {
      const event = rail.verifyEvent(Buffer.from(body.raw, 'base64'), body.headers['stripe-signature']);
      const outcome = SESSION_OUTCOMES[event.type];
      if (!outcome) return null;
      // Signed, yet not shaped as Stripe sends a session event (no object): nothing of ours.
      const session = event.data?.object as CheckoutSession | null | undefined;
      if (!session || typeof session !== 'object') return null;
      const paymentId = session.metadata?.payment_id;
      const payment = paymentId ? await payments.getById(paymentId) : undefined;
      if (payment?.provider !== 'stripe' || payment.provider_ref !== sessionRef(session.id, event.account)) return null;
      return { payment, eventId: event.id, label: event.type, outcome: async () => outcome(session, payment) };
    },
  };
}

/** Stripe (CARDPROC_PROVIDER=stripe): its settings, gathered into the payments configuration by the registry. */
export const stripeSettings = {
  /** Card processor (CARDPROC_PROVIDER=stripe): the secret API key and the signing secret of the endpoint registered for /public/webhook/cardproc. */
  STRIPE_SECRET_KEY: secretSetting.optional(),
  STRIPE_WEBHOOK_SECRET: secretSetting.optional(),
  /**
   * Stripe's API base (tests point it at a local server); unset: the SDK's default, https://api.stripe.com.
   * Scheme, host and port only: the SDK puts its own /v1/ there and drops any path (found from outside:
   * every card checkout 503 with "Invalid JSON received from the Stripe API").
   */
  STRIPE_API_URL: urlSetting
    .refine((u) => {
      const url = new URL(u);
      return url.pathname === '/' && !url.search && !url.hash && !url.username && !url.password;
    }, "must be scheme, host and port only (Stripe's SDK adds /v1/ itself and drops any path)")
    .optional(),
};
