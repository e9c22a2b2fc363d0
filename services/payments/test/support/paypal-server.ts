import { createSign, createVerify, generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { crc32 } from 'node:zlib';
import { brokenBody } from './http-fake.js';

/**
 * A PayPal REST server on loopback speaking the real wire format of what the wallet-processor rail uses:
 * OAuth2 client credentials (`POST /v1/oauth2/token`, basic auth, form body), Orders v2 (create, get,
 * capture, with `PayPal-Request-Id` idempotency and PayPal's JSON shapes, links and error bodies) and
 * `POST /v1/notifications/verify-webhook-signature`. Every API call needs a Bearer token it issued.
 *
 * Webhook deliveries are signed as PayPal signs them: SHA256withRSA over
 * `<transmission id>|<transmission time>|<webhook id>|<crc32 of the body>`, with a key only this server
 * holds. So verification answers SUCCESS exactly for what this server `signed` for the webhook id the
 * caller names, on the exact event it signed, and FAILURE for anything forged or altered.
 */

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  /** Parsed JSON, or the raw text of a form body. */
  body: unknown;
}

export interface PaypalCapture {
  id: string;
  status: 'COMPLETED' | 'DECLINED' | 'PENDING';
  amount: { currency_code: string; value: string };
  final_capture: boolean;
  custom_id?: string;
  invoice_id?: string;
  seller_protection: { status: string; dispute_categories: string[] };
  supplementary_data: { related_ids: { order_id: string } };
  create_time: string;
  update_time: string;
  links: { href: string; rel: string; method: string }[];
}

export interface PaypalOrderState {
  id: string;
  intent: 'CAPTURE';
  status: 'CREATED' | 'PAYER_ACTION_REQUIRED' | 'APPROVED' | 'VOIDED' | 'COMPLETED';
  /** As created (custom_id, invoice_id, description, amount, payee), plus `payments` once captured. */
  purchase_units: Record<string, any>[];
  /** The create request's payment_source.paypal.experience_context. */
  experience_context?: Record<string, unknown>;
  payer?: Record<string, unknown>;
  create_time: string;
  update_time: string;
  /** What the capture of this order will come out as (the payer's funding source decides). */
  captureOutcome: PaypalCapture['status'];
}

export interface SignedDelivery {
  /** The exact body to POST. */
  body: string;
  /** The PAYPAL-* headers PayPal sends with it. */
  headers: Record<string, string>;
}

export interface PaypalServer {
  url: string;
  clientId: string;
  clientSecret: string;
  /** The webhook registered for this deployment's callback URL. */
  webhookId: string;
  requests: RecordedRequest[];
  orders: Map<string, PaypalOrderState>;
  /** Token requests answered with a token. */
  tokensIssued: number;
  /** Lifetime of the tokens it issues (seconds). */
  tokenLifetimeS: number;
  /** The next answers: this status (a PayPal 5xx body) instead, or after a delay. */
  /** `minimalCapture`: captures answer minimal whatever `Prefer` says (as a proxy that drops the header would). */
  /**
   * `stall`: the headers and the start of the body, then nothing (a PayPal that hangs mid-answer);
   * `endless`: a 200 whose body never ends.
   */
  faults: { status?: number; delayMs?: number; minimalCapture?: boolean; body?: 'stall' | 'endless' };
  /** Invalidates every token issued so far, as PayPal does when it rotates them early. */
  revokeTokens(): void;
  /** The payer logs in and approves the order; its capture will come out as `capture` (COMPLETED unless said). */
  approve(orderId: string, capture?: PaypalCapture['status']): void;
  /** The order as `GET /v2/checkout/orders/{id}` answers it. */
  orderJson(id: string): Record<string, unknown>;
  /** PayPal decides a PENDING capture (an eCheck clears, or is denied). */
  settleCapture(orderId: string, status: 'COMPLETED' | 'DECLINED'): void;
  /** A webhook event as PayPal builds it, from the order's current state (capture events need a capture). */
  event(eventType: 'CHECKOUT.ORDER.APPROVED' | 'PAYMENT.CAPTURE.COMPLETED' | 'PAYMENT.CAPTURE.DENIED', orderId: string): Record<string, unknown>;
  /** Signs an event for delivery (for `webhookId` unless another webhook is named). */
  sign(event: unknown, webhookId?: string): SignedDelivery;
  close(): Promise<void>;
}

const AUTH_FAILURE = {
  name: 'AUTHENTICATION_FAILURE',
  message: 'Authentication failed due to invalid authentication credentials or a missing Authorization header.',
  links: [{ href: 'https://developer.paypal.com/docs/api/overview/#error', rel: 'information_link' }],
};

/** PayPal's error body: name, message, details with issue codes, debug_id. */
function apiError(status: number, name: string, message: string, details: { issue: string; description: string; field?: string; location?: string }[] = []) {
  return {
    status,
    body: {
      name,
      message,
      debug_id: randomBytes(7).toString('hex'),
      details,
      links: details.map((d) => ({ href: `https://developer.paypal.com/docs/api/orders/v2/#error-${d.issue}`, rel: 'information_link', method: 'GET' })),
    },
  };
}

const invalidRequest = (details: { field: string; issue: string; description: string }[]) =>
  apiError(
    400,
    'INVALID_REQUEST',
    'Request is not well-formed, syntactically incorrect, or violates schema.',
    details.map((d) => ({ ...d, location: 'body' })),
  );
const unprocessable = (issue: string, description: string) =>
  apiError(422, 'UNPROCESSABLE_ENTITY', 'The requested action could not be performed, semantically incorrect, or failed business validation.', [
    { issue, description },
  ]);
const notFound = () =>
  apiError(404, 'RESOURCE_NOT_FOUND', 'The specified resource does not exist.', [
    { issue: 'INVALID_RESOURCE_ID', description: 'Specified resource ID does not exist. Please check the resource ID and try again.' },
  ]);

/** PayPal ids: 17 upper-case letters and digits. */
const paypalId = () => Array.from(randomBytes(17), (b) => 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'[b % 36]).join('');
const isoNow = () => new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
const str = (v: unknown, max: number) => typeof v === 'string' && v.length >= 1 && v.length <= max;

export async function startPaypalServer(opts: { clientId?: string; clientSecret?: string; webhookId?: string } = {}): Promise<PaypalServer> {
  const clientId = opts.clientId ?? `A${randomBytes(20).toString('base64url')}`;
  const clientSecret = opts.clientSecret ?? `E${randomBytes(20).toString('base64url')}`;
  const webhookId = opts.webhookId ?? paypalId();
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const certId = `CERT-360caa42-fca2a594-${randomBytes(4).toString('hex')}`;
  const requests: RecordedRequest[] = [];
  const orders = new Map<string, PaypalOrderState>();
  const tokens = new Map<string, number>(); // token -> expiry (ms)
  /** Request id -> the answer it got (only successes are kept, as PayPal replays them). */
  const idempotent = new Map<string, { status: number; body: unknown }>();
  let base = '';

  const link = (href: string, rel: string, method = 'GET') => ({ href, rel, method });
  const orderJson = (id: string) => {
    const o = orders.get(id)!;
    return {
      id: o.id,
      intent: o.intent,
      status: o.status,
      payment_source: { paypal: o.payer ? { email_address: o.payer.email_address, account_id: (o.payer as any).payer_id, account_status: 'VERIFIED' } : {} },
      purchase_units: o.purchase_units,
      ...(o.payer ? { payer: o.payer } : {}),
      create_time: o.create_time,
      update_time: o.update_time,
      links: [
        link(`${base}/v2/checkout/orders/${id}`, 'self'),
        ...(o.status === 'PAYER_ACTION_REQUIRED' ? [link(`${base}/checkoutnow?token=${id}`, 'payer-action')] : []),
        ...(o.status === 'CREATED' ? [link(`${base}/checkoutnow?token=${id}`, 'approve')] : []),
        ...(o.status === 'APPROVED' ? [link(`${base}/v2/checkout/orders/${id}/capture`, 'capture', 'POST')] : []),
      ],
    };
  };
  const captureOf = (o: PaypalOrderState): PaypalCapture | undefined => o.purchase_units[0]!.payments?.captures?.[0];

  function createOrder(b: any): { status: number; body: unknown } {
    const problems: { field: string; issue: string; description: string }[] = [];
    const miss = (field: string) => problems.push({ field, issue: 'MISSING_REQUIRED_PARAMETER', description: 'A required field / parameter is missing.' });
    const bad = (field: string) => problems.push({ field, issue: 'INVALID_PARAMETER_VALUE', description: 'The value of a field is invalid.' });
    if (b?.intent === undefined) miss('/intent');
    else if (b.intent !== 'CAPTURE' && b.intent !== 'AUTHORIZE') bad('/intent');
    if (!Array.isArray(b?.purchase_units) || b.purchase_units.length < 1 || b.purchase_units.length > 10) miss('/purchase_units');
    const u = Array.isArray(b?.purchase_units) ? b.purchase_units[0] : undefined;
    if (u) {
      if (!u.amount) miss("/purchase_units/@reference_id=='default'/amount");
      else {
        if (!/^[A-Z]{3}$/.test(u.amount.currency_code ?? '')) bad("/purchase_units/@reference_id=='default'/amount/currency_code");
        if (typeof u.amount.value !== 'string' || !/^\d{1,10}(\.\d{2})?$/.test(u.amount.value) || Number(u.amount.value) <= 0) {
          bad("/purchase_units/@reference_id=='default'/amount/value");
        }
      }
      for (const k of ['custom_id', 'invoice_id', 'description', 'reference_id'] as const)
        if (u[k] !== undefined && !str(u[k], k === 'reference_id' ? 256 : 127)) bad(`/purchase_units/0/${k}`);
      if (u.payee !== undefined && !/^[A-Z0-9]{13}$/.test(u.payee?.merchant_id ?? '')) bad('/purchase_units/0/payee/merchant_id');
    }
    const ctx = b?.payment_source?.paypal?.experience_context;
    if (ctx)
      for (const k of ['return_url', 'cancel_url'] as const)
        if (ctx[k] !== undefined && !/^https?:\/\/\S+$/.test(ctx[k])) bad(`/payment_source/paypal/experience_context/${k}`);
    if (problems.length) return invalidRequest(problems);
    // PayPal takes whole amounts only for these (https://developer.paypal.com/reference/currency-codes/).
    if (['HUF', 'JPY', 'TWD'].includes(u.amount.currency_code) && u.amount.value.includes('.')) {
      return unprocessable('DECIMALS_NOT_SUPPORTED', 'Currency code does not support decimals.');
    }
    const id = paypalId();
    const now = isoNow();
    orders.set(id, {
      id,
      intent: 'CAPTURE',
      status: b.payment_source?.paypal ? 'PAYER_ACTION_REQUIRED' : 'CREATED',
      purchase_units: b.purchase_units.map((p: any) => ({ reference_id: 'default', ...p })),
      ...(ctx ? { experience_context: ctx } : {}),
      create_time: now,
      update_time: now,
      captureOutcome: 'COMPLETED',
    });
    const o = orderJson(id);
    // The minimal representation (Prefer: return=minimal, PayPal's default).
    return { status: 201, body: { id: o.id, status: o.status, ...(b.payment_source?.paypal ? { payment_source: { paypal: {} } } : {}), links: o.links } };
  }

  function capture(id: string): { status: number; body: unknown } {
    const o = orders.get(id);
    if (!o) return notFound();
    if (o.status === 'COMPLETED')
      return unprocessable('ORDER_ALREADY_CAPTURED', "Order already captured.If 'intent=CAPTURE' only one capture per order is allowed.");
    if (o.status !== 'APPROVED')
      return unprocessable(
        'ORDER_NOT_APPROVED',
        "Payer has not yet approved the Order for payment. Please redirect the payer to the 'rel':'approve' url returned as part of the HATEOAS links within the Create Order call or provide a valid payment_source in the request.",
      );
    const now = isoNow();
    const u = o.purchase_units[0]!;
    const captureId = paypalId();
    const c: PaypalCapture = {
      id: captureId,
      status: o.captureOutcome,
      amount: u.amount,
      final_capture: true,
      ...(u.custom_id ? { custom_id: u.custom_id } : {}),
      ...(u.invoice_id ? { invoice_id: u.invoice_id } : {}),
      seller_protection: { status: 'ELIGIBLE', dispute_categories: ['ITEM_NOT_RECEIVED', 'UNAUTHORIZED_TRANSACTION'] },
      supplementary_data: { related_ids: { order_id: id } },
      create_time: now,
      update_time: now,
      links: [
        link(`${base}/v2/payments/captures/${captureId}`, 'self'),
        link(`${base}/v2/payments/captures/${captureId}/refund`, 'refund', 'POST'),
        link(`${base}/v2/checkout/orders/${id}`, 'up'),
      ],
    };
    u.payments = { captures: [c] };
    o.status = 'COMPLETED';
    o.update_time = now;
    return { status: 201, body: orderJson(id) };
  }

  /**
   * A successful answer as PayPal shapes it by the `Prefer` header: the whole order only with
   * `return=representation`, else the minimal one (id, status, links: no amounts), PayPal's default.
   */
  function asPreferred(req: RecordedRequest, a: { status: number; body: unknown }): { status: number; body: unknown } {
    const full = !server.faults.minimalCapture && /\breturn=representation\b/.test(String(req.headers.prefer ?? ''));
    if (a.status >= 300 || full) return a;
    const { id, status, links } = a.body as { id: string; status: string; links: unknown };
    return { status: a.status, body: { id, status, links } };
  }

  function signedPayload(transmissionId: string, time: string, hookId: string, body: string): string {
    return `${transmissionId}|${time}|${hookId}|${crc32(Buffer.from(body, 'utf8')) >>> 0}`;
  }

  function verify(b: any): { status: number; body: unknown } {
    const fields = ['auth_algo', 'cert_url', 'transmission_id', 'transmission_sig', 'transmission_time', 'webhook_id'] as const;
    const missing = fields.filter((f) => typeof b?.[f] !== 'string' || !b[f]);
    if (b?.webhook_event === undefined) missing.push('webhook_event' as never);
    if (missing.length) {
      return apiError(
        400,
        'VALIDATION_ERROR',
        'Invalid request - see details',
        missing.map((f) => ({ field: f, issue: 'MISSING_REQUIRED_PARAMETER', description: `${f} is required`, location: 'body' })),
      );
    }
    let ok = b.auth_algo === 'SHA256withRSA' && b.cert_url === `${base}/v1/notifications/certs/${certId}`;
    if (ok) {
      const v = createVerify('RSA-SHA256');
      v.update(signedPayload(b.transmission_id, b.transmission_time, b.webhook_id, JSON.stringify(b.webhook_event)));
      ok = v.verify(publicKey, b.transmission_sig, 'base64');
    }
    // Signed for another webhook of the account is no use to this one.
    return { status: 200, body: { verification_status: ok && b.webhook_id === webhookId ? 'SUCCESS' : 'FAILURE' } };
  }

  function route(req: RecordedRequest, raw: string): { status: number; body: unknown } {
    if (req.method === 'POST' && req.path === '/v1/oauth2/token') {
      const basic = /^Basic (.+)$/.exec(String(req.headers.authorization ?? ''))?.[1];
      if (!basic || Buffer.from(basic, 'base64').toString('utf8') !== `${clientId}:${clientSecret}`) {
        return { status: 401, body: { error: 'invalid_client', error_description: 'Client Authentication failed' } };
      }
      if (
        !String(req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded') ||
        new URLSearchParams(raw).get('grant_type') !== 'client_credentials'
      ) {
        return { status: 400, body: { error: 'unsupported_grant_type', error_description: 'Grant Type is NULL' } };
      }
      const token = `A21AA${randomBytes(40).toString('base64url')}`;
      tokens.set(token, Date.now() + server.tokenLifetimeS * 1000);
      server.tokensIssued++;
      return {
        status: 200,
        body: {
          scope: 'https://uri.paypal.com/services/payments/payment',
          access_token: token,
          token_type: 'Bearer',
          app_id: 'APP-80W284485P519543T',
          expires_in: server.tokenLifetimeS,
          nonce: `${isoNow()}${randomBytes(8).toString('hex')}`,
        },
      };
    }
    const bearer = /^Bearer (.+)$/.exec(String(req.headers.authorization ?? ''))?.[1];
    if (!bearer || !((tokens.get(bearer) ?? 0) > Date.now())) return { status: 401, body: AUTH_FAILURE };
    if (req.method === 'POST' && !String(req.headers['content-type'] ?? '').startsWith('application/json')) {
      return apiError(415, 'UNSUPPORTED_MEDIA_TYPE', "The server does not support the request payload's media type.");
    }
    if (req.method === 'POST' && req.path === '/v1/notifications/verify-webhook-signature') return verify(req.body);

    const requestId = req.headers['paypal-request-id'] as string | undefined;
    const replay = (key: string, answer: () => { status: number; body: unknown }) => {
      if (!requestId) return answer();
      const k = `${key} ${requestId}`;
      const seen = idempotent.get(k);
      // A replay answers 200 with the first answer's body.
      if (seen) return { status: 200, body: seen.body };
      const a = answer();
      if (a.status < 300) idempotent.set(k, a);
      return a;
    };
    if (req.method === 'POST' && req.path === '/v2/checkout/orders') return replay('create', () => createOrder(req.body));
    const m = /^\/v2\/checkout\/orders\/([A-Z0-9]+)(\/capture)?$/.exec(req.path);
    if (m && req.method === 'GET' && !m[2]) return orders.has(m[1]!) ? { status: 200, body: orderJson(m[1]!) } : notFound();
    if (m && req.method === 'POST' && m[2])
      return asPreferred(
        req,
        replay(`capture ${m[1]}`, () => capture(m[1]!)),
      );
    return apiError(404, 'NOT_FOUND', 'The specified resource does not exist.');
  }

  const http = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (raw += c));
    req.on('end', async () => {
      let body: unknown = raw;
      if (String(req.headers['content-type'] ?? '').startsWith('application/json') && raw) {
        try {
          body = JSON.parse(raw);
        } catch {
          return send(res, 400, invalidRequest([{ field: '/', issue: 'MALFORMED_REQUEST_JSON', description: 'The request JSON is not well formed.' }]).body);
        }
      }
      const rec: RecordedRequest = { method: req.method ?? 'GET', path: (req.url ?? '/').split('?')[0]!, headers: req.headers, body };
      requests.push(rec);
      if (server.faults.delayMs) await new Promise((r) => setTimeout(r, server.faults.delayMs));
      if (server.faults.status)
        return send(res, server.faults.status, apiError(server.faults.status, 'INTERNAL_SERVER_ERROR', 'An internal server error has occurred.').body);
      if (server.faults.body) return brokenBody(res, '{"verification_status":"SUC', server.faults.body);
      const out = route(rec, raw);
      send(res, out.status, out.body);
    });
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;

  const server: PaypalServer = {
    url: base,
    clientId,
    clientSecret,
    webhookId,
    requests,
    orders,
    tokensIssued: 0,
    tokenLifetimeS: 32_400,
    faults: {},
    revokeTokens: () => tokens.clear(),
    approve(orderId, outcome = 'COMPLETED') {
      const o = orders.get(orderId);
      if (!o) throw new Error(`no order ${orderId}`);
      if (o.status !== 'CREATED' && o.status !== 'PAYER_ACTION_REQUIRED') throw new Error(`order ${orderId} is ${o.status}`);
      const payerId = paypalId().slice(0, 13);
      o.payer = { name: { given_name: 'John', surname: 'Doe' }, email_address: 'buyer@example.com', payer_id: payerId, address: { country_code: 'US' } };
      o.status = 'APPROVED';
      o.captureOutcome = outcome;
      o.update_time = isoNow();
    },
    orderJson,
    settleCapture(orderId, status) {
      const c = orders.get(orderId) && captureOf(orders.get(orderId)!);
      if (c?.status !== 'PENDING') throw new Error(`order ${orderId} has no pending capture`);
      c.status = status;
      c.update_time = isoNow();
    },
    event(eventType, orderId) {
      const o = orders.get(orderId);
      if (!o) throw new Error(`no order ${orderId}`);
      const approved = eventType === 'CHECKOUT.ORDER.APPROVED';
      const c = captureOf(o);
      if (!approved && !c) throw new Error(`order ${orderId} has no capture to announce`);
      return {
        id: `WH-${paypalId()}-${paypalId()}`,
        event_version: '1.0',
        create_time: isoNow(),
        resource_type: approved ? 'checkout-order' : 'capture',
        resource_version: '2.0',
        event_type: eventType,
        summary: approved
          ? 'An order has been approved by buyer'
          : `Payment ${eventType === 'PAYMENT.CAPTURE.COMPLETED' ? 'completed' : 'denied'} for ${c!.amount.value} ${c!.amount.currency_code}`,
        resource: approved ? orderJson(orderId) : { ...c },
        links: [
          link(`${base}/v1/notifications/webhooks-events/WH-${orderId}`, 'self'),
          link(`${base}/v1/notifications/webhooks-events/WH-${orderId}/resend`, 'resend', 'POST'),
        ],
      };
    },
    sign(event, hookId = webhookId) {
      const body = JSON.stringify(event);
      const transmissionId = randomUUID();
      const time = isoNow();
      const s = createSign('RSA-SHA256');
      s.update(signedPayload(transmissionId, time, hookId, body));
      return {
        body,
        headers: {
          'paypal-transmission-id': transmissionId,
          'paypal-transmission-time': time,
          'paypal-transmission-sig': s.sign(privateKey, 'base64'),
          'paypal-cert-url': `${base}/v1/notifications/certs/${certId}`,
          'paypal-auth-algo': 'SHA256withRSA',
          'paypal-auth-version': 'v2',
        },
      };
    },
    close: () =>
      new Promise((r) => {
        http.closeAllConnections();
        http.close(() => r());
      }),
  };
  return server;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.destroyed) return;
  res.writeHead(status, { 'content-type': 'application/json', 'paypal-debug-id': randomBytes(7).toString('hex') });
  res.end(JSON.stringify(body));
}
