import { createHash, randomUUID } from 'node:crypto';
import { IncomingMessage, type RequestListener, ServerResponse, type ServerOptions } from 'node:http';
import type { Socket } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import { context, propagation, ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { Counter, Histogram, type Registry } from 'prom-client';
import {
  API_PREFIX,
  buildOpenApiDocument,
  messages,
  routes,
  STILL_IN_PROGRESS,
  toValidationDetail,
  undecodableQueryIssues,
  unstorableIssues,
  duplicateKeyIssues,
  z,
  type Caller,
  type CallbackRequest,
  type RouteDef,
  type ValidationIssue,
} from '@sb/contracts';
import {
  BusUnavailableError,
  busWaitMs,
  callMessage,
  DB_UNAVAILABLE_DETAIL,
  isDbUnavailable,
  newId,
  opsHandler,
  tracer,
  within,
  withoutShownOnce,
  type BusClient,
  type Db,
  type Logger,
  type ReadinessCheck,
} from '@sb/runtime';
import { compileApiRoutes } from './api-routes.js';
import { AuthError, type KeyResolver } from './auth.js';
import type { RateLimiter } from './domain/rate-limit.js';
import { answerAsPage, hostedPages, jsonFile, type PlanOffered, prefersHtml, sendFile } from './pages.js';
import type { IdempotencyRepo } from './store/idempotency.repo.js';
import { httpOf } from './errors.js';

interface GatewayDeps {
  db: Db;
  bus: BusClient;
  keys: KeyResolver;
  idempotency: IdempotencyRepo;
  limits: { perKey: RateLimiter; publicPost: RateLimiter; publicGet: RateLimiter };
  log: Logger;
  registry: Registry;
  ready: ReadinessCheck;
  /** Proxy hops in front of the gateway (express's numeric `trust proxy`). */
  trustProxy: number;
  devMode: boolean;
  /** The bus wait of routes that set none (BUS_TIMEOUT_MS). */
  busTimeoutMs: number;
  /** The built pages (web/dist); see pages.ts. */
  webDir: string;
}

/** Added to a route's bus wait to make the lease of its in-progress Idempotency-Key claim. */
const IDEMPOTENCY_LEASE_MARGIN_S = 5;
/** How soon a key whose release met the database away is tried again. */
const RELEASE_RETRY_MS = 500;

const BODY_LIMIT = '64kb';
const BODY_LIMIT_BYTES = 64 * 1024;
/**
 * How long the rest of a refused oversized body is read and dropped before the connection is cut: a client
 * that stops sending on the 413 reads it whole (cutting at once can reset the connection under an unread
 * answer), one that goes on sending is stopped.
 */
const OVERSIZED_LINGER_MS = 1000;
/** Seconds a client is asked to wait before retrying a 503 (a peer or the database away). */
const RETRY_AFTER_S = '1';

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string | ValidationIssue[],
    readonly headers: Record<string, string> = {},
  ) {
    super(typeof detail === 'string' ? detail : 'validation failed');
  }
}

/** The request handler, and the server options that make its requests and responses Express's. */
export interface GatewayApp {
  options: ServerOptions;
  listener: RequestListener;
  /**
   * The answer to a CONNECT of `target` (the server's 'connect' event, which has no response object to
   * go through the listener): the 405 any method a route's path does not take gets, or a 400.
   */
  refuseConnect(target: string, requestId?: string | string[]): { status: number; detail: string; headers: Record<string, string> };
}

/** The status an access log line and the metrics give a request whose client went away before its answer (nginx's "client closed request"). */
const CLIENT_GONE_STATUS = 499;

export function createApp(d: GatewayDeps): GatewayApp {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', d.trustProxy);
  app.set('etag', false);

  const requests = new Counter({ name: 'http_requests_total', help: 'HTTP requests', labelNames: ['route', 'method', 'status'], registers: [d.registry] });
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration',
    labelNames: ['route', 'method'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [d.registry],
  });

  // The metric children of each route, method and status, made once (prom-client hashes the labels on every call).
  const children = new Map<string, { observe(seconds: number): void }>();
  const metricsOf = (route: string, method: string, status: number) => {
    const key = `${route} ${method} ${status}`;
    let c = children.get(key);
    if (!c) {
      const count = requests.labels({ route, method, status });
      const time = duration.labels({ route, method });
      c = {
        observe: (seconds) => {
          count.inc();
          time.observe(seconds);
        },
      };
      children.set(key, c);
    }
    return c;
  };

  // The caller's X-Request-Id when it is a sane one, else a new one.
  const requestIdOf = (incoming: string | string[] | undefined) =>
    typeof incoming === 'string' && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : randomUUID();

  // Request id, server span (continuing an incoming traceparent), metrics and one access log line.
  const observe = (req: Request, res: Response, next: () => void) => {
    const requestId = requestIdOf(req.headers['x-request-id']);
    res.locals.requestId = requestId;
    res.setHeader('X-Request-Id', requestId);
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    const span = tracer().startSpan(
      `HTTP ${req.method}`,
      { kind: SpanKind.SERVER, attributes: { 'http.request.method': req.method, 'url.path': shownPath(req.path) } },
      parent,
    );
    res.setHeader('X-Trace-Id', span.spanContext().traceId);
    const started = performance.now();
    let logged = false;
    // `gone`: the client closed its connection before the answer was sent (the request may still run to its end).
    const done = (gone: boolean) => {
      if (logged) return;
      logged = true;
      const route = (res.locals.routeId as string | undefined) ?? 'unmatched';
      const status = gone ? CLIENT_GONE_STATUS : res.statusCode;
      span.setAttribute('http.response.status_code', status);
      span.setAttribute('http.route', route);
      span.updateName(`${req.method} ${route}`);
      span.end();
      const seconds = (performance.now() - started) / 1000;
      metricsOf(route, req.method, status).observe(seconds);
      // Probes and scrapes come every few seconds from the kubelet and Prometheus: debug, not info.
      const level = route === 'ops' ? 'debug' : 'info';
      if (d.log.isLevelEnabled(level)) {
        context.with(trace.setSpan(parent, span), () =>
          d.log[level](
            {
              req_id: requestId,
              method: req.method,
              path: shownPath(req.path),
              route,
              status,
              ms: Math.round(seconds * 1000),
              ...(gone ? { client_gone: true } : {}),
            },
            'request',
          ),
        );
      }
    };
    res.on('finish', () => done(false));
    res.on('close', () => done(!res.writableFinished));
    context.with(trace.setSpan(parent, span), next);
  };

  // The decoder would put U+FFFD for bytes that are not UTF-8 and the request would go on with other text
  // than was sent: such a body is refused before it is decoded.
  // Its text is kept for the duplicate-key check, which JSON.parse cannot make (it keeps the last).
  const json = express.json({
    limit: BODY_LIMIT,
    type: () => true,
    strict: false,
    verify: (req, _res, buf, encoding) => {
      (req as WithJsonText).jsonText = decodedText(buf, encoding);
    },
  });
  const raw = express.raw({ limit: BODY_LIMIT, type: () => true });

  // Every API route in one step (see api-routes.ts); Express's layers answer only what is not one of them.
  const apiRoute = compileApiRoutes(
    API_PREFIX,
    (routes as readonly RouteDef[]).filter((r) => !r.devOnly || d.devMode),
  );
  // An API route's request never walks these layers (the listener serves it); what no route takes (an
  // unknown path, a method a path does not take) does, and the 405 is answered last.
  const ops = opsHandler(d.registry, d.ready);
  app.get(['/healthz', '/readyz', '/metrics'], (req, res, next) => {
    res.locals.routeId = 'ops';
    ops(req, res).then((done) => (done ? undefined : next()), next);
  });

  const pages = hostedPages(d.webDir, d.log, planOffered(d));

  // 230 KB of JSON the API reference loads on each visit: compressed, and revalidated by its ETag.
  const openapi = jsonFile(buildOpenApiDocument());
  app.get(`${API_PREFIX}/openapi.json`, (req, res, next) => {
    res.locals.routeId = 'openapi';
    res.setHeader('Cache-Control', 'no-cache');
    sendFile(req, res, openapi).catch(next);
  });

  // Before the pages: a route's path asked with another method (OPTIONS too) is the 405 that names all of
  // the path's methods, where the router would answer an OPTIONS of a page's path with its GET alone.
  app.use((req, res, next) => {
    const match = apiRoute(req.method, req.path);
    if (match?.kind !== 'method_not_allowed') return next();
    res.locals.routeId = 'method_not_allowed';
    res.set('Allow', match.allow).status(405).json({ detail: 'Method Not Allowed' });
  });

  app.use(pages.router);

  app.use((_req: Request, res: Response) => {
    res.status(404).json({ detail: 'Not Found' });
  });

  const fail = (err: unknown, res: Response): void => {
    if (res.headersSent) return;
    if (err instanceof HttpError) {
      res.set(err.headers).status(err.status).json({ detail: err.detail });
      return;
    }
    // A page's path segment that is not UTF-8 once decoded (a lone surrogate, `%ED%A0%80`) names nothing.
    if (err instanceof URIError) return void res.status(404).json({ detail: 'Not Found' });
    const e = err as { type?: string; status?: number };
    if (e?.type === 'entity.parse.failed') return void res.status(400).json({ detail: 'Malformed JSON body' });
    if (e?.type === NOT_DECODABLE) return void res.status(400).json({ detail: 'Request body is not valid UTF-8' });
    if (e?.type === 'entity.too.large') return void res.status(413).json({ detail: `Request body is larger than ${BODY_LIMIT}` });
    if (e?.type === 'charset.unsupported') return void res.status(415).json({ detail: 'Unsupported charset: send the JSON body as UTF-8' });
    if (e?.type === 'encoding.unsupported') {
      return void res.status(415).json({ detail: 'Unsupported Content-Encoding: send the body as it is, or gzip, deflate or br' });
    }
    if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500) {
      return void res.status(e.status).json({ detail: 'Bad request body' });
    }
    // The gateway's own queries (API keys, Idempotency-Key records) while the database is away.
    if (isDbUnavailable(err)) {
      d.log.warn({ err: (err as Error).message }, 'database unavailable');
      return void res.set('Retry-After', RETRY_AFTER_S).status(503).json({ detail: DB_UNAVAILABLE_DETAIL });
    }
    const id = newId('err_');
    d.log.error({ err, error_id: id }, 'unexpected error');
    res.status(500).json({ detail: `Unexpected error! ID: ${id}` });
  };
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => fail(err, res));

  // The server makes requests and responses with Express's methods from the start: app.handle gives each
  // one its prototypes, and changing an object's prototype is slow in V8.
  class ApiRequest extends IncomingMessage {}
  Object.setPrototypeOf(ApiRequest.prototype, app.request);
  class ApiResponse extends ServerResponse {}
  Object.setPrototypeOf(ApiResponse.prototype, app.response);

  // A request for an API route goes straight to its handler, not through the router: its layers were a
  // tenth of the gateway's time per request.
  const listener: RequestListener = (incoming, outgoing) => {
    const req = incoming as Request;
    const res = outgoing as Response;
    req.res = res;
    res.req = req;
    res.locals = Object.create(null);
    req.originalUrl = req.url;
    req.baseUrl = '';
    try {
      observe(req, res, () => {
        const match = apiRoute(req.method, req.path);
        // The URL of a route that is also a page (RouteDef.page): a browser, which prefers HTML, gets a page
        // made from the route's answer (pages.ts); any other client the route's JSON, as everywhere in the API.
        if (match?.kind === 'route' && match.route.page) {
          // One URL, two answers: a cache (the browser's own, for Back) must not give the page's JSON for the page.
          res.setHeader('Vary', 'Accept');
          if (prefersHtml(req)) answerAsPage(pages, match.route.page, req, res);
        }
        if (match?.kind !== 'route') return void app(req, res);
        // An answer is for the one request: none is kept by a browser or a cache on the way (found from
        // outside: the portal's subscriptions, chosen by a token header, came without it). A page made
        // from a route's answer says its own.
        res.setHeader('Cache-Control', 'no-store');
        const { route, params } = match;
        req.params = params;
        res.locals.routeId = route.id;
        if (Number(req.headers['content-length']) > BODY_LIMIT_BYTES) return refuseOversized(req, res);
        if (route.auth === 'none' && !(route.rawBody || route.formBody) && declaredNotJson(req)) return fail(new HttpError(415, NOT_JSON), res);
        (route.rawBody || route.formBody ? raw : json)(req, res, (err?: unknown) =>
          err ? fail(err, res) : serve(d, route, req, res, match.undecodable).catch((e) => fail(e, res)),
        );
      });
    } catch (err) {
      fail(err, res);
    }
  };
  const refuseConnect = (target: string, incomingId?: string | string[]): ReturnType<GatewayApp['refuseConnect']> => {
    // A proxy's authority form (`host:443`) is no path: nothing here takes it.
    const match = target.startsWith('/') ? apiRoute('CONNECT', target.split('?')[0]!) : undefined;
    const requestId = requestIdOf(incomingId);
    const answer: ReturnType<GatewayApp['refuseConnect']> =
      match?.kind === 'method_not_allowed'
        ? { status: 405, detail: 'Method Not Allowed', headers: { Allow: match.allow, 'X-Request-Id': requestId } }
        : { status: 400, detail: 'CONNECT is not supported: this server is not a proxy', headers: { 'X-Request-Id': requestId } };
    // Probes for open proxies are worth seeing in the log and the metrics, as any other refused request.
    metricsOf('unmatched', 'CONNECT', answer.status).observe(0);
    d.log.info({ req_id: requestId, method: 'CONNECT', path: shownPath(target.split('?')[0]!), route: 'unmatched', status: answer.status, ms: 0 }, 'request');
    return answer;
  };
  return { options: { IncomingMessage: ApiRequest, ServerResponse: ApiResponse } as ServerOptions, listener, refuseConnect };
}

/**
 * The path as logs and traces show it: an unsubscribe link's token (it never expires, and logs reach more
 * people than the database) is left out.
 */
const shownPath = (path: string) => path.replace(/(\/public\/unsubscribe\/)[^/]+/, '$1{token}');

/**
 * A body declared larger than the limit is refused before any of it is read: the body parser would read
 * it all (to keep the connection usable) before answering, so a client sending megabytes would wait for
 * its whole upload and the gateway would read it for nothing. The answer says `Connection: close`; Node
 * would then destroy the socket at once, and a client still sending would get a reset that can cost it
 * the 413: the connection is half-closed instead (the answer, then FIN), what still comes is dropped for
 * a while, and then it is cut.
 */
function refuseOversized(req: Request, res: Response): void {
  const socket = req.socket as Socket & { destroySoon?: () => void };
  socket.destroySoon = () => {
    socket.end();
    setTimeout(() => socket.destroy(), OVERSIZED_LINGER_MS).unref();
  };
  res.setHeader('Connection', 'close');
  res.status(413).json({ detail: `Request body is larger than ${BODY_LIMIT}` });
}

/**
 * What a route without a query or body schema takes: nothing. A parameter it would ignore is refused
 * (`DELETE /plans/{id}?dry_run=true` archived the plan), as unknown fields are where there is a schema;
 * an empty object body is still fine.
 */
const NOTHING = z.object({}).strict();

function parsePart(schema: RouteDef['query'] | RouteDef['body'], value: unknown, where: string, issues: ValidationIssue[]): unknown {
  if (!schema) return undefined;
  // The input tells an absent field from a wrong one in the answer (see toValidationDetail).
  const r = schema.safeParse(value, { reportInput: true });
  if (r.success) return r.data;
  issues.push(...toValidationDetail(r.error.issues, where));
  return undefined;
}

const PAGE_LOOKUP_MS = 2000;

/** The route a checkout page asks for its plan: the page's answer for an unknown plan is the route's. */
const PUBLIC_PLAN = (routes as readonly RouteDef[]).find((r) => r.id === 'public.plan.get')!;

/**
 * Whether a checkout address's plan can be bought: billing's answer to what the page's own request for
 * the plan would find, within the same per-address budget (a page load is one request of that budget
 * more, never a way around it). Past the budget, or with billing away, slow or of a version that does not
 * know the question, it cannot be told and the page is served.
 */
function planOffered(d: GatewayDeps): PlanOffered {
  return async (req, id) => {
    if (unstorableIssues({ id }, 'path').length || !PUBLIC_PLAN.params!.safeParse({ id }).success) return { offered: false, archived: false };
    if (d.limits.publicGet.take(`${req.ip}`) > 0) return undefined;
    // Not as long as an API request may wait (a route's own wait only lengthens BUS_TIMEOUT_MS): a page
    // that shows nothing for seconds is worse than the page's own look-up.
    const asked = callMessage(d.bus, messages.planOffered, { id }).then(
      (r) => r,
      () => undefined,
    );
    return within(asked, PAGE_LOOKUP_MS, () => undefined);
  };
}

/** `undecodable`: the path parameter that is not UTF-8 once percent-decoded, if any (api-routes.ts). */
async function serve(d: GatewayDeps, route: RouteDef, req: Request, res: Response, undecodable?: string): Promise<void> {
  // Public routes, the subscriber portal's included (its token is no owner's key), count per client address.
  if (route.auth === 'none' || route.auth === 'subscriber') {
    // Provider callbacks and mail providers' one-click unsubscribes come in bursts from few addresses:
    // they get the larger public budget.
    const limiter = route.method === 'get' || route.rawBody || route.formBody ? d.limits.publicGet : d.limits.publicPost;
    limit(limiter, `${req.ip}`);
  }
  let caller: Caller;
  try {
    caller = await d.keys.callerFor(route.auth, req.headers);
  } catch (err) {
    // Keys nobody has (each a database lookup) count against the address's public budget.
    if (err instanceof AuthError && err.status === 401 && route.auth !== 'none' && route.auth !== 'subscriber') limit(d.limits.publicGet, `${req.ip}`);
    if (err instanceof AuthError) throw new HttpError(err.status, err.detail);
    throw err;
  }
  if (caller.wallet_id) limit(d.limits.perKey, caller.wallet_id);

  // Before any schema or other work: an id that cannot be stored names nothing (404, as an unknown id; the
  // owner's own words, "Plan not found", are the owner's: the answer names the parameter instead); any
  // other value that cannot be stored, or nests too deep, is refused by name (422), whether or not the
  // route reads it.
  const badParam = undecodable ?? unstorableIssues(req.params, 'path')[0]?.loc[1];
  if (badParam !== undefined)
    throw new HttpError(404, `Not found: no ${badParam} contains NUL, an unpaired surrogate or text that does not percent-decode to UTF-8`);
  const rawQuery = req.originalUrl.includes('?') ? req.originalUrl.slice(req.originalUrl.indexOf('?') + 1) : '';
  const unstorable = [
    ...undecodableQueryIssues(rawQuery),
    ...unstorableIssues({ ...(req.query as object) }, 'query'),
    ...(route.rawBody || route.formBody ? [] : unstorableIssues(req.body, 'body')),
    ...(route.rawBody || route.formBody || (req as WithJsonText).jsonText === undefined ? [] : duplicateKeyIssues((req as WithJsonText).jsonText!, 'body')),
  ];
  if (unstorable.length) throw new HttpError(422, unstorable);

  const issues: ValidationIssue[] = [];
  const params = parsePart(route.params, req.params, 'path', issues) ?? {};
  const query = parsePart(route.query ?? NOTHING, { ...(req.query as object) }, 'query', issues) ?? {};
  let body: unknown;
  if (route.rawBody) {
    body = {
      raw: Buffer.isBuffer(req.body) ? req.body.toString('base64') : '',
      headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : String(v ?? '')])),
      method: req.method === 'GET' ? 'GET' : 'POST',
    };
  } else if (route.formBody) {
    // Read (up to the limit) and left: the route acts on its path, whatever form encoding the sender chose.
  } else if (route.body) {
    if (!hasBody(req) && !route.bodyOptional) {
      issues.push({ loc: ['body'], msg: 'Field required', type: 'missing' });
    } else if (hasBody(req)) {
      body = parsePart(route.body, req.body, 'body', issues);
    }
  } else if (hasBody(req)) {
    parsePart(NOTHING, req.body, 'body', issues);
  }
  if (issues.length) throw new HttpError(422, issues);

  // PATCH (the portal's settings) takes a key as the portal's POSTs do; PUT and DELETE need none.
  const idemKey = route.method === 'post' || route.method === 'patch' ? idempotencyKeyOf(req) : undefined;
  if (idemKey !== undefined && (idemKey.length < 1 || idemKey.length > 255)) {
    // HTTP drops a header value's surrounding spaces: a key of spaces arrives empty (found from outside:
    // " " was told it was not 1 to 255 characters long).
    const msg = idemKey.length ? 'Must be 1 to 255 characters' : 'Must not be empty or only spaces (1 to 255 characters)';
    throw new HttpError(422, [{ loc: ['header', 'Idempotency-Key'], msg, type: 'string_length' }]);
  }
  // A key belongs to whoever holds the credential: a portal request's to its token (by the token's hash),
  // so another token, valid or not, never gets a subscriber's answer replayed nor spoils their key.
  const scope = idemKey
    ? (caller.wallet_id ?? (caller.subscriber_token_hash ? `subscriber:${caller.subscriber_token_hash}` : anonymousScope(route, params, req.ip)))
    : '';
  const keyed = idemKey ? { ...caller, idempotency_key: createHash('sha256').update(`${scope}\n${idemKey}`).digest('hex') } : caller;
  // Built from the parts validated above (the owner validates the message once more as it receives it):
  // parsing it here again, with a schema built per request, was a zod compilation per request.
  // Every answerer is told until when the gateway waits (it may have another BUS_TIMEOUT_MS): a change it
  // could only commit after the gateway answered 503 "please retry" is not made (withCallerDeadline).
  const told = { ...keyed, answer_by: Date.now() + busWaitMs(d.busTimeoutMs, route.busTimeoutMs) };
  const message = { caller: told, params, query, body };
  // A claim is held for as long as the request can run (the bus wait) plus a margin: a gateway that died
  // mid-request does not lock its key for a day; a retry after the lease runs the request again.
  const leaseSeconds = Math.ceil(busWaitMs(d.busTimeoutMs, route.busTimeoutMs) / 1000) + IDEMPOTENCY_LEASE_MARGIN_S;
  // Until when a failed request may still free its key: the claim's lease, less the margin (it is counted
  // from just before the claim, so never past the lease the database counts).
  const releaseBy = Date.now() + (leaseSeconds - IDEMPOTENCY_LEASE_MARGIN_S) * 1000;
  if (idemKey) {
    // What the route acts on, as validated: a body a route does not take is not part of the request.
    const acted = route.rawBody ? (body as CallbackRequest).raw : (body ?? null);
    const hash = createHash('sha256')
      .update(`${route.id}\n${JSON.stringify(params)}\n${JSON.stringify(query)}\n${JSON.stringify(acted)}`)
      .digest('hex');
    const claim = await d.idempotency.claim(d.db, scope, idemKey, hash, leaseSeconds);
    if (claim.kind === 'mismatch') throw new HttpError(409, 'Idempotency-Key was already used with a different request');
    if (claim.kind === 'in_progress') throw new HttpError(409, STILL_IN_PROGRESS, { 'Retry-After': RETRY_AFTER_S });
    if (claim.kind === 'replay') {
      res.setHeader('Idempotent-Replayed', 'true');
      res.status(claim.status).json(claim.body);
      return;
    }
  }

  let status: number;
  let payload: unknown;
  try {
    const reply = await d.bus.request(route.subject, message, route.busTimeoutMs);
    if (reply.ok) {
      const out = route.response.safeParse(reply.data);
      if (!out.success) throw new Error(`reply of ${route.subject} breaks its contract: ${out.error.message}`);
      status = route.status ?? 200;
      payload = out.data;
    } else {
      const http = httpOf(reply.error);
      status = http.status;
      payload = { detail: http.detail };
      if (status === 503) res.setHeader('Retry-After', RETRY_AFTER_S);
    }
  } catch (err) {
    // Two layers: this store answers every keyed request that got an answer (and keeps two tries of one
    // key from running at once), but a bus failure leaves the outcome unknown: the service may have made
    // the change after we gave up. The key is freed so that the retry reaches the service again, and a
    // service whose writes must not double records the answer with its change (answerOnce, @sb/runtime):
    // it answers the retry with what the first try did, or runs it when the first try never arrived.
    if (idemKey) await releaseKey(d, scope, idemKey, releaseBy);
    if (err instanceof BusUnavailableError) {
      d.log.warn({ err: err.message }, 'bus request failed');
      throw new HttpError(
        503,
        err.noResponders
          ? // No subscription on the bus: the service is down, or still starting (waiting for its database).
            'This operation is not available right now: the service that answers it is not running or not ready yet'
          : 'Service did not answer in time, please retry',
        { 'Retry-After': RETRY_AFTER_S },
      );
    }
    throw err;
  }
  if (idemKey) {
    if (status >= 500) await releaseKey(d, scope, idemKey, releaseBy);
    // The request ran: a database gone just now must not turn its answer into a 503 (the retry would
    // find the key in progress, never run it twice).
    else
      await d.idempotency.complete(d.db, scope, idemKey, status, withoutShownOnce(payload, route.shownOnce)).catch((err) => {
        if (!isDbUnavailable(err)) throw err;
        d.log.warn({ err: (err as Error).message }, 'Idempotency-Key answer not stored: database unavailable');
      });
  }
  res.status(status).json(payload);
}

/**
 * An anonymous request's key scope: the client's address (as the proxies we trust report it), so that
 * another client sending the same key and body is not replayed the first one's answer (a checkout's
 * portal link; found from outside); and for a path that is a credential (an unsubscribe link) that path
 * too: another link's request with the same key is not "the same key with another body". Hashed: the
 * scope is stored, and holds an address and a token.
 */
function anonymousScope(route: RouteDef, params: object, address: string | undefined): string {
  const perPath = Object.keys(params).length ? `\n${route.id}\n${JSON.stringify(params)}` : '';
  return `public:${createHash('sha256')
    .update(`${address ?? ''}${perPath}`)
    .digest('hex')}`;
}

/**
 * Frees the key of a request that failed, so that the client's retry runs it. With the database away
 * just then (the likely cause of the failure) the release is tried again in the background until shortly
 * before the claim's lease ends (`until`, counted from the claim); until it lands every retry would meet
 * "still in progress". It stops before the lease ends, so it never frees a claim a later request took.
 */
function releaseKey(d: GatewayDeps, scope: string, key: string, until: number): Promise<void> {
  const attempt = (): Promise<void> =>
    d.idempotency.release(d.db, scope, key).catch((err) => {
      if (!isDbUnavailable(err)) d.log.error({ err }, 'Idempotency-Key not released');
      else if (Date.now() + RELEASE_RETRY_MS < until) setTimeout(() => void attempt(), RELEASE_RETRY_MS).unref();
    });
  return attempt();
}

/** How many times a request sent a header: Node keeps the first Host of several, and joins others with ", ". */
export function headerCount(rawHeaders: readonly string[], name: string): number {
  let n = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) if (rawHeaders[i]!.length === name.length && rawHeaders[i]!.toLowerCase() === name) n++;
  return n;
}

/**
 * The request's Idempotency-Key. Two of them would reach us joined (`K, other`), a key of its own: the
 * request would run again rather than be replayed, so it is refused, as a key of the wrong length is.
 */
function idempotencyKeyOf(req: Request): string | undefined {
  const key = req.headers['idempotency-key'] as string | undefined;
  if (key !== undefined && headerCount(req.rawHeaders, 'idempotency-key') > 1) {
    throw new HttpError(422, [{ loc: ['header', 'Idempotency-Key'], msg: 'Send one Idempotency-Key header, not more', type: 'too_many' }]);
  }
  return key;
}

/** The JSON parser turns an empty body into `{}`; a request that sent no bytes has no body. */
function hasBody(req: Request): boolean {
  const length = req.headers['content-length'];
  return length !== undefined ? length !== '0' : req.headers['transfer-encoding'] !== undefined;
}

function limit(limiter: RateLimiter, key: string): void {
  const wait = limiter.take(key);
  if (wait > 0) throw new HttpError(429, 'Too many requests, slow down', { 'Retry-After': String(wait) });
}

const NOT_DECODABLE = 'entity.not.decodable';

const NOT_JSON = 'Unsupported Content-Type: send the body as application/json';
/**
 * A body declared as something else than JSON (text/plain, a form) sent to a route without credentials
 * is not read as JSON regardless (found from outside: it was): such a POST needs no CORS preflight, so
 * any web page could make a visitor's browser send one. A route with a key or token needs a header that
 * a browser asks leave for first, so its scripts may go on sending JSON as text/plain (found in review).
 * A request without a body, or with no or an empty Content-Type, is read as before.
 */
const declaredNotJson = (req: Request): boolean =>
  !!req.headers['content-type'] && Number(req.headers['content-length']) !== 0 && req.is(['json', '+json']) === false;

/** A request whose JSON body was read: its text, decoded once (the duplicate-key scan reads it). */
type WithJsonText = Request & { jsonText?: string };

/**
 * JSON between systems is UTF-8 (RFC 8259): body-parser would decode any `utf-*` charset it is told
 * (UTF-16 taken, a UTF-8 body labelled UTF-16 "malformed"), so anything else is refused as it refuses
 * latin1.
 */
function decodedText(buf: Buffer, encoding: string): string {
  if (encoding && encoding !== 'utf-8' && encoding !== 'utf8')
    throw Object.assign(new Error(`unsupported charset "${encoding}"`), { status: 415, type: 'charset.unsupported' });
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch {
    throw Object.assign(new Error('Request body is not valid UTF-8'), { status: 400, type: NOT_DECODABLE });
  }
}
