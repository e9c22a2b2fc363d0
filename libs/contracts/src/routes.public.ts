import { z } from './zod.js';
import { IdParams, Paginated, PaginationQuery, SuccessMessageResponse } from './common.js';
import { defineRoutes } from './http.js';
import {
  NWCPortalConnect,
  NWCSubscriptionCreate,
  NWCSubscriptionResponse,
  NWCValidateRequest,
  NWCValidateResponse,
  PortalWallet,
  PortalWalletConnected,
} from './nwc.js';
import { CallbackAck, PaymentStatusResponse, PortalPayment, SubscribeRequest, SubscribeResponse } from './payments.js';
import { PortalSubscription, PortalSubscriptionUpdate, UnsubscribeLink } from './subscriptions.js';

/**
 * The token of a one-click unsubscribe URL (domain/unsubscribe.ts in billing reads it). No length bound:
 * a token people follow in a link is ours or it is not (404, "This link does not work"); a too-long one
 * refused as invalid input told a person to try again. The URL's own limit (431) bounds it.
 */
const UnsubscribeParams = z.object({ token: z.string().min(1).openapi({ description: 'From the e-mail header' }) });

/** Public checkout and NWC (no authentication); `GET /public/plan/{id}` is in the plan routes. */
export const publicRoutes = defineRoutes([
  {
    id: 'public.subscribe',
    method: 'post',
    path: '/public/subscribe',
    auth: 'none',
    summary: 'Subscribe: a checkout for paid plans, an active trial for plans with a free trial',
    body: SubscribeRequest,
    response: SubscribeResponse,
    status: 201,
    subject: 'billing.public.subscribe',
  },
  {
    id: 'public.payment.status',
    method: 'get',
    path: '/public/payment/{id}/status',
    auth: 'none',
    summary: 'Poll the status of a checkout payment',
    params: IdParams,
    response: PaymentStatusResponse,
    subject: 'payments.public.payment_status',
  },
  {
    id: 'public.nwc.validate',
    method: 'post',
    path: '/public/nwc/validate',
    auth: 'none',
    summary: 'Check an NWC connection string and that the wallet can pay invoices',
    body: NWCValidateRequest,
    response: NWCValidateResponse,
    subject: 'nwc.public.validate',
    // The wallet's relays get NWC_INFO_TIMEOUT_MS (10 s) to deliver its info event: a slow relay is an
    // answer (`valid: false` and why), not a 503 at the default bus wait.
    busTimeoutMs: 30_000,
  },
  {
    id: 'public.subscribe.nwc',
    method: 'post',
    path: '/public/subscribe/nwc',
    auth: 'none',
    summary: 'Subscribe with NWC automatic payments; the first payment is attempted at once',
    body: NWCSubscriptionCreate,
    response: NWCSubscriptionResponse,
    status: 201,
    subject: 'nwc.public.subscribe',
    // Relay connection and the wallet's info event (up to ~20 s with NWC_INFO_TIMEOUT_MS 10 s), billing and
    // payments calls, and the wallet's answer to pay_invoice (NWC_REPLY_TIMEOUT_MS, 30 s): giving up
    // earlier would tell the client to retry a checkout the wallet may have paid.
    busTimeoutMs: 75_000,
  },
  {
    id: 'public.unsubscribe.get',
    method: 'get',
    path: '/public/unsubscribe/{token}',
    auth: 'none',
    summary: 'What a one-click unsubscribe URL would turn off (changes nothing)',
    description:
      "The subscription's plan and merchant and the kind of notice the token names, and whether it is still on; changes " +
      'nothing. A request that prefers `text/html` to JSON (a browser opening the link) gets the hosted page instead, ' +
      'which asks this and offers the POST. An unknown or altered token: 404.',
    params: UnsubscribeParams,
    query: z.looseObject({}),
    response: UnsubscribeLink,
    page: 'unsubscribe',
    subject: 'billing.public.unsubscribe_link',
  },
  {
    id: 'public.unsubscribe',
    method: 'post',
    path: '/public/unsubscribe/{token}',
    auth: 'none',
    summary: "One-click unsubscribe (RFC 8058): the List-Unsubscribe URL of a subscriber's e-mail",
    description:
      'Turns off the kind of notice the e-mail was (`receive_reminders` for a reminder, `receive_confirmations` for a ' +
      'confirmation or receipt) for that one subscription; idempotent (200 again when already off). The token is ' +
      'purpose-limited (it names the subscription and the kind, signed by the server) and is not the portal token. The body ' +
      '(`List-Unsubscribe=One-Click`) is not read. A GET of the same URL changes nothing: a browser gets a page that asks first. ' +
      "An unknown or altered token: 404. A request that prefers `text/html` to JSON (that page's form, posted by a browser " +
      'without JavaScript) gets the same status with an HTML page that says the outcome in words.',
    params: UnsubscribeParams,
    // A link people follow may come with parameters a mail tracker added (utm_source=...): not ours to refuse.
    query: z.looseObject({}),
    body: z
      .object({ 'List-Unsubscribe': z.literal('One-Click') })
      .openapi({ description: 'As RFC 8058 sends it (multipart/form-data or application/x-www-form-urlencoded); not read' }),
    bodyOptional: true,
    formBody: true,
    response: SuccessMessageResponse,
    // The page's form posted without JavaScript: the browser shows the outcome in words, not this JSON.
    page: 'unsubscribe',
    subject: 'billing.public.unsubscribe',
  },
] as const);

/** Subscriber portal (header X-Subscriber-Token): only the token's own subscriber is visible. */
export const portalRoutes = defineRoutes([
  {
    id: 'portal.subscriptions.list',
    method: 'get',
    path: '/public/manage/subscriptions',
    auth: 'subscriber',
    summary: "List the subscriber's subscriptions",
    query: PaginationQuery,
    response: Paginated(PortalSubscription),
    subject: 'billing.portal.list_subscriptions',
  },
  {
    id: 'portal.subscriptions.cancel',
    method: 'post',
    path: '/public/manage/subscription/{id}/cancel',
    auth: 'subscriber',
    summary: 'Cancel one of my subscriptions at the end of the current period',
    params: IdParams,
    response: SuccessMessageResponse,
    subject: 'billing.portal.cancel_subscription',
  },
  {
    id: 'portal.subscriptions.invoice',
    method: 'post',
    path: '/public/manage/subscription/{id}/invoice',
    auth: 'subscriber',
    summary: 'An invoice to pay for one of my subscriptions waiting for its first payment (a fresh one when it ran out)',
    description:
      'For a subscription still waiting for its first payment (`pending`, never paid: a checkout, not a resume): answers the ' +
      'payment that can pay it now, its first invoice while that is open, else a fresh one on the same payment method (the ' +
      "checkout page's fresh invoice, for a subscriber who left it). Another subscriber's subscription is 404 like an unknown " +
      'one; any other state is 409 (a renewal is always payable in the portal as it is).',
    params: IdParams,
    response: PortalPayment,
    subject: 'billing.portal.checkout_invoice',
  },
  {
    id: 'portal.subscriptions.update',
    method: 'patch',
    path: '/public/manage/subscription/{id}',
    auth: 'subscriber',
    summary: 'Choose which notices of one of my subscriptions I get (reminders, confirmations)',
    description:
      'Sets `receive_reminders` and/or `receive_confirmations`; answers the subscription as the portal lists it. Another ' +
      "subscriber's subscription is 404 like an unknown one; an ended one (cancelled or expired: it gets no more reminders " +
      "or confirmations) is 409. An `Idempotency-Key` is honoured as on the portal's POSTs.",
    params: IdParams,
    body: PortalSubscriptionUpdate,
    response: PortalSubscription,
    subject: 'billing.portal.update_subscription',
  },
  {
    id: 'portal.payments.list',
    method: 'get',
    path: '/public/manage/payments',
    auth: 'subscriber',
    summary: "The subscriber's payments, newest first: receipts of paid ones, and what pays an open one",
    query: PaginationQuery,
    response: Paginated(PortalPayment),
    subject: 'billing.portal.list_payments',
  },
  {
    id: 'portal.wallets.list',
    method: 'get',
    path: '/public/manage/wallets',
    auth: 'subscriber',
    summary: "List the subscriber's NWC wallets",
    query: PaginationQuery,
    response: Paginated(PortalWallet),
    subject: 'nwc.portal.list_wallets',
  },
  {
    id: 'portal.wallets.connect',
    method: 'post',
    path: '/public/manage/wallets',
    auth: 'subscriber',
    summary:
      'Connect an NWC wallet to one of my NWC subscriptions; it pays the renewals from now on (replacing an earlier wallet), and a first payment still due at once',
    body: NWCPortalConnect,
    response: PortalWalletConnected,
    status: 201,
    subject: 'nwc.portal.connect_wallet',
    // As the NWC checkout's: the wallet's info event, billing and payments calls, and the wallet's answer
    // to pay_invoice for a first payment still due (NWC_REPLY_TIMEOUT_MS, 30 s).
    busTimeoutMs: 75_000,
  },
  {
    id: 'portal.wallets.disconnect',
    method: 'delete',
    path: '/public/manage/wallets/{id}',
    auth: 'subscriber',
    summary: 'Disconnect an NWC wallet; its subscriptions renew by invoice',
    params: IdParams,
    response: SuccessMessageResponse,
    subject: 'nwc.portal.disconnect_wallet',
  },
] as const);

/**
 * Provider callbacks: no key, verified by the payments service on the raw bytes. The routes carry no
 * body schema; the gateway sends a CallbackRequest (payments.ts) on the subject instead of a parsed body.
 * The charge server calls with GET by default, hence the GET twin of its route.
 */
const ProviderEvent = (description: string) => z.object({}).catchall(z.unknown()).openapi({ description });

export const webhookRoutes = defineRoutes([
  {
    id: 'webhooks.chargeproc',
    method: 'post',
    path: '/public/webhook/chargeproc',
    auth: 'none',
    summary: 'On-chain and Lightning payment confirmations from the charge server',
    description:
      'The body is never trusted: only the charge id is taken from it (a JSON object with `id`, or that object as a JSON-encoded ' +
      'string), the charge is fetched from the charge server and applied when paid. Unknown or unverifiable: 400 `Invalid callback`; ' +
      'charge server unreachable: 503 (it retries).',
    body: ProviderEvent('The charge server\'s notification, e.g. `{"id": "<charge id>"}`'),
    bodyOptional: true,
    response: CallbackAck,
    subject: 'payments.webhooks.chargeproc',
    rawBody: true,
  },
  {
    id: 'webhooks.chargeproc.get',
    method: 'get',
    path: '/public/webhook/chargeproc',
    auth: 'none',
    summary: 'Charge-server confirmation sent with GET (its default)',
    description: 'As the POST form; the charge id comes in the body if any, else nothing can be verified (400).',
    response: CallbackAck,
    subject: 'payments.webhooks.chargeproc',
    rawBody: true,
  },
  {
    id: 'webhooks.cardproc',
    method: 'post',
    path: '/public/webhook/cardproc',
    auth: 'none',
    summary: 'Card payment confirmations (signed)',
    description:
      'A Stripe event (`checkout.session.*`), verified with `Stripe-Signature` (HMAC-SHA256 over the exact bytes, timestamp ' +
      'within 300 s either side) before anything is read; deduplicated by event id. Without a Stripe provider nothing can verify ' +
      'it: 400 `Invalid callback`.',
    body: ProviderEvent('A Stripe Event object'),
    headers: z.object({ 'stripe-signature': z.string().openapi({ description: '`t=<unix seconds>,v1=<hex HMAC>`' }) }),
    response: CallbackAck,
    subject: 'payments.webhooks.cardproc',
    rawBody: true,
  },
  {
    id: 'webhooks.walletproc',
    method: 'post',
    path: '/public/webhook/walletproc',
    auth: 'none',
    summary: 'Wallet-processor payment confirmations (verified with the processor)',
    description:
      "A PayPal webhook event, verified through PayPal's verify-webhook-signature call with its transmission headers; " +
      'deduplicated by event id. Without a PayPal provider nothing can verify it: 400 `Invalid callback`.',
    body: ProviderEvent('A PayPal webhook event (`CHECKOUT.ORDER.APPROVED`, `PAYMENT.CAPTURE.COMPLETED`, `PAYMENT.CAPTURE.DENIED`)'),
    headers: z
      .object({
        'paypal-transmission-id': z.string(),
        'paypal-transmission-time': z.string(),
        'paypal-transmission-sig': z.string(),
        'paypal-cert-url': z.string(),
        'paypal-auth-algo': z.string(),
      })
      .partial(),
    response: CallbackAck,
    subject: 'payments.webhooks.walletproc',
    rawBody: true,
  },
] as const);
