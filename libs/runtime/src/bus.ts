import { context, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { errors, headers as natsHeaders, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { BusReply, WORKING_HEADER, WORKING_PROBE_SUBJECT, WORKING_SUFFIX, type z } from '@sb/contracts';
import { isDbUnavailable } from './db.js';
import { CallerGoneError } from './deadline.js';
import { BusUnavailableError, DomainError } from './errors.js';
import { newId } from './ids.js';
import type { Logger } from './logger.js';
import { Listener } from './listener.js';
import { connectNats, connectNatsWhenReachable, natsOptions, natsReachable, type NatsSettings } from './nats.js';
import { ReplyInbox, type Wait } from './reply-inbox.js';
import { extractTraceContext, injectTraceHeaders, tracer } from './telemetry.js';

/**
 * The request/reply framing on the wire: the one NestJS's NATS transport used before (request
 * `{pattern, data, id}`, reply `{response, isDisposed, id}`), kept so that services of the previous and
 * the next version answer each other during a rolling update. The transport itself is the NATS client's
 * request/reply: one PUB per request on the connection's shared reply subscription, where Nest's client
 * subscribed and unsubscribed an inbox per request (three protocol lines, two socket writes).
 */
interface WireRequest {
  pattern: string;
  data: unknown;
  id: string;
}
interface WireReply {
  response?: unknown;
  err?: unknown;
  isDisposed?: boolean;
  id?: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const encode = (x: unknown) => encoder.encode(JSON.stringify(x));
/** Request ids only pair a reply with its request on one connection (a reply subject per request does that already). */
let nextRequestId = 0;

/** How long a bus request waits: a route's own wait lengthens BUS_TIMEOUT_MS, never shortens it. */
export const busWaitMs = (busTimeoutMs: number, routeTimeoutMs?: number): number => Math.max(busTimeoutMs, routeTimeoutMs ?? 0);

/** `p`, or a BusUnavailableError after `ms` (a first connection to an unreachable host can hang for long). */
function withTimeout<T>(p: Promise<T>, ms: number, subject: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new BusUnavailableError(`${subject}: bus not reachable`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** How long a request waits for a dropped NATS connection to come back before it is answered unavailable. */
const RECONNECT_GRACE_MS = 1000;
/** The least time without a working signal before a long request fails (a short BUS_TIMEOUT_MS would be jitter). */
const MIN_IDLE_MS = 2000;
/** How often an answerer at work says so, at most (a few signals fit in the idle time). */
const MAX_SIGNAL_EVERY_MS = 1000;

/** Request/reply over NATS, with the W3C trace context in the message headers. */
export class BusClient {
  private conn: { nc: NatsConnection; inbox: ReplyInbox } | undefined;
  private connecting: Promise<{ nc: NatsConnection; inbox: ReplyInbox }> | undefined;
  private closed = false;
  /** Set while the connection is down (the client reconnects by itself): resolves when it is back. */
  private down: { back: Promise<void>; resolve: () => void } | undefined;

  constructor(
    private readonly settings: string | NatsSettings,
    private readonly timeoutMs: number,
    private readonly name = 'gateway',
    /** Where the reply inbox says it is being made again. */
    private readonly log?: Pick<Logger, 'warn' | 'info'>,
  ) {}

  /**
   * Connects (once at a time). A client whose first connection failed (NATS away at start) tries again
   * on its next request; once connected, the NATS client reconnects by itself for ever.
   */
  async connect(): Promise<void> {
    await this.open();
  }

  private open(): Promise<{ nc: NatsConnection; inbox: ReplyInbox }> {
    if (this.conn && !this.conn.nc.isClosed()) return Promise.resolve(this.conn);
    this.connecting ??= connectNats(this.settings, this.name).then(
      (nc) => {
        this.connecting = undefined;
        if (this.closed) return nc.close().then(() => Promise.reject(new Error('bus client closed')));
        this.conn = { nc, inbox: new ReplyInbox(nc, natsOptions(this.settings, this.name).inboxPrefix, this.log) };
        // Should it ever fail, requests go on with their timeouts, as before it.
        this.watch(nc).catch(() => undefined);
        return this.conn;
      },
      (err) => {
        this.connecting = undefined;
        throw err;
      },
    );
    return this.connecting;
  }

  /** Follows the connection's state, so that requests while it is down fail at once rather than at their timeout. */
  private async watch(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect' && !this.down) {
        let resolve!: () => void;
        const back = new Promise<void>((r) => (resolve = r));
        this.down = { back, resolve };
      } else if (s.type === 'reconnect' && this.down) {
        this.down.resolve();
        this.down = undefined;
      }
    }
    // Closed for good: the next request opens a new connection.
    this.down?.resolve();
    this.down = undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    // The replies on their way are still taken (a payment made downstream is answered, not a 503).
    const until = Date.now() + this.timeoutMs;
    while ((this.conn?.inbox.pending ?? 0) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    const nc = this.conn?.nc;
    this.conn?.inbox.close();
    this.conn = undefined;
    await nc?.drain().catch(() => nc.close());
  }

  /** True when the NATS server answers a round trip within a second. */
  reachable(): Promise<boolean> {
    return natsReachable(this.conn?.nc);
  }

  /** How long a request waits for its answer (`timeoutMs`: the message's or route's own wait): told to an answerer that must answer in time. */
  waitMs(timeoutMs?: number): number {
    return busWaitMs(this.timeoutMs, timeoutMs);
  }

  /**
   * A request that may wait longer than the idle time asks for working signals: an answerer that dies
   * mid-request is then noticed after the idle time, not at the end of the long wait. The idle rule starts
   * with the first signal, never before: an answerer of an older version sends none (a rollback, or old and
   * new replicas side by side during a rolling update, take the same requests), and a request it is working
   * on must get its whole wait (found from outside: trusting a service from its earlier answers made such
   * requests 503 after the idle time while the old replica did the work). So a request lost before any
   * answerer took it (in a killed process's socket, with a dying NATS server) still waits its whole wait.
   */
  private signalsFor(wait: number): Wait['signals'] {
    const idleMs = Math.max(this.timeoutMs, MIN_IDLE_MS);
    if (wait <= idleMs) return undefined;
    return { idleMs, signalEveryMs: Math.min(MAX_SIGNAL_EVERY_MS, Math.floor(idleMs / 4)) };
  }

  /** `timeoutMs` lengthens the wait for a request known to be slow; it never shortens BUS_TIMEOUT_MS. */
  async request(subject: string, payload: unknown, timeoutMs?: number): Promise<BusReply> {
    // The span is not made active: nothing runs inside it but the round trip, and its context goes out in the headers.
    const span = tracer().startSpan(`${subject} send`, {
      kind: SpanKind.PRODUCER,
      attributes: { 'messaging.system': 'nats', 'messaging.destination.name': subject },
    });
    try {
      const wait = busWaitMs(this.timeoutMs, timeoutMs);
      // NATS away: a reconnect in the next moment is waited for, a longer outage answered at once (503),
      // not after the whole bus wait of every request.
      if (this.down) await Promise.race([this.down.back, new Promise((r) => setTimeout(r, RECONNECT_GRACE_MS).unref())]);
      if (this.down) throw new BusUnavailableError(`${subject}: NATS is not connected`);
      const { inbox } = this.conn && !this.conn.nc.isClosed() ? this.conn : await withTimeout(this.open(), wait, subject);
      const h = natsHeaders();
      injectTraceHeaders(h, trace.setSpan(context.active(), span));
      const request: WireRequest = { pattern: subject, data: payload, id: String(++nextRequestId) };
      const msg = await inbox.request(subject, encode(request), h, { waitMs: wait, signals: this.signalsFor(wait) });
      const wire = JSON.parse(decoder.decode(msg.data)) as WireReply;
      if (wire.err !== undefined) throw new Error(typeof wire.err === 'string' ? wire.err : JSON.stringify(wire.err));
      return BusReply.parse(wire.response);
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      // A malformed reply is our own bug (500), unlike a missing peer (503).
      if ((err as Error)?.name === 'ZodError' || err instanceof BusUnavailableError) throw err;
      throw new BusUnavailableError(`${subject}: ${(err as Error)?.message ?? String(err)}`, false, err instanceof errors.PermissionViolationError);
    } finally {
      span.end();
    }
  }
}

/** What a client sees while the database cannot be reached (a 503 with Retry-After). */
export const DB_UNAVAILABLE_DETAIL = 'The database is not available right now, please retry';

/** A bus handler as the server runs it: `handle` is only ever given what `request` parsed. */
export interface Handler {
  subject: string;
  request: z.ZodType;
  /** Validates what the handler answers before it leaves the service (the receiver checks it again). */
  response?: z.ZodType;
  handle(input: unknown): Promise<unknown>;
}

/** A handler typed by its request schema; the server parses with that schema before calling it. */
export function defineHandler<S extends z.ZodType>(h: {
  subject: string;
  request: S;
  response?: z.ZodType;
  handle(input: z.output<S>): Promise<unknown>;
}): Handler {
  return h;
}

/**
 * How long a stopping service waits for the requests it is answering: past the longest route's wait (75 s:
 * the NWC checkout and the portal's wallet connect; found in review: cut at 60 s). The pods'
 * terminationGracePeriodSeconds (deploy/k8s) leaves room for it after the preStop pause.
 */
export const DRAIN_MAX_MS = 80_000;
/** How long a closing server waits for the server to confirm its subscriptions are gone. */
const SUB_DRAIN_MAX_MS = 2_000;
/** After the NATS server refused working signals, when a service asks again (its configuration may have been reloaded). */
const SIGNALS_REPROBE_MS = 60_000;
/** Bounds on the interval a caller asks working signals at. */
const SIGNAL_EVERY_MIN_MS = 100;
const SIGNAL_EVERY_MAX_MS = 5_000;

/**
 * A service's side of the bus: one subscription per handler subject in the service's queue group (so
 * replicas share the load), answered through the NATS client's callbacks. On close it stops taking
 * requests, then waits until those in flight are answered (at most DRAIN_MAX_MS, within the pod's
 * terminationGracePeriodSeconds of 95 s) before it closes its connection.
 */
export class BusServer {
  private nc: NatsConnection | undefined;
  private readonly subs = new Map<Handler, Subscription>();
  private readonly routes: { handler: Handler; log: Logger }[] = [];
  private listener: Listener | undefined;
  /** Why a subscription of the current try was refused (the server answers before the flush returns). */
  private refused: Error | undefined;
  private closing = false;
  inFlight = 0;
  /**
   * Whether this service sends working signals (WORKING_HEADER): only once the NATS server is known to
   * allow them (an auth.conf older than the code refuses them; its answers then say they send none, and
   * their callers wait their whole wait, as before signals).
   */
  private signals: { on: boolean; checkedAt: number; refused: boolean; told: boolean; probing: boolean } = {
    on: false,
    checkedAt: 0,
    refused: false,
    told: false,
    probing: false,
  };

  constructor(
    private readonly conn: string | NatsSettings,
    private readonly queue: string,
  ) {}

  /** Adds a handler; handlers are subscribed by `listen`. */
  add(handler: Handler, log: Logger): void {
    this.routes.push({ handler, log });
    if (this.nc && this.listener?.up) this.subscribe(this.nc, handler, log);
  }

  /** True while every handler's subscription is in place (what /readyz reports). */
  get listening(): boolean {
    return !!this.listener?.up && !!this.nc && !this.nc.isClosed();
  }

  /**
   * Connects and subscribes; resolves (and calls `callback`) once the server has the subscriptions.
   * Until then it keeps trying, whatever the failure (NATS not up, a refused login, a subject its
   * permissions do not allow yet), and a subscription the server drops or refuses later is made again
   * the same way: a service whose auth.conf was older than its code answers once the config is reloaded.
   */
  async listen(callback?: (err?: unknown) => void): Promise<void> {
    try {
      await this.start();
    } catch (err) {
      callback?.(err);
      if (callback) return;
      throw err;
    }
    callback?.();
  }

  private async start(): Promise<void> {
    const log = this.routes[0]?.log;
    this.nc ??= await connectNatsWhenReachable(this.conn, this.queue, log ?? { warn: () => undefined });
    const nc = this.nc;
    void this.watchStatus(nc, log);
    // Before the first subscription: the first requests already get their signals when the server allows them.
    await this.probeSignals(nc, log);
    this.listener ??= new Listener(`bus answers of ${this.queue}`, () => this.subscribeAll(nc), {
      log,
      details: { subjects: this.routes.map((r) => r.handler.subject) },
    });
    await this.listener.run();
  }

  /** One try: every handler without its subscription subscribed, confirmed by a round trip. */
  private async subscribeAll(nc: NatsConnection): Promise<void> {
    if (this.closing) return;
    this.refused = undefined;
    for (const { handler, log } of this.routes) if (!this.subs.has(handler)) this.subscribe(nc, handler, log);
    // A request that arrives right after the service says it is ready must find its subscription; a
    // subscription the server refuses is answered with an error before this round trip returns.
    await nc.flush();
    if (this.refused) throw this.refused;
  }

  /** Asks the server whether it lets this service send working signals: a refusal comes before the round trip's answer. */
  private async probeSignals(nc: NatsConnection, log: Logger | undefined): Promise<void> {
    const s = this.signals;
    if (s.probing) return;
    s.probing = true;
    s.refused = false;
    try {
      nc.publish(WORKING_PROBE_SUBJECT);
      await Promise.race([nc.flush(), new Promise((_, reject) => setTimeout(() => reject(new Error('no answer')), SUB_DRAIN_MAX_MS).unref())]);
      // The status iterator (where the refusal is reported) runs after the flush's answer resolves.
      await new Promise((r) => setImmediate(r));
      s.on = !s.refused;
      if (s.on && s.told) log?.info({}, 'working signals allowed again by the NATS server');
      if (s.on) s.told = false;
    } catch {
      // NATS away: asked again later.
      s.on = false;
    } finally {
      s.checkedAt = Date.now();
      s.probing = false;
    }
  }

  /** The NATS server refused a working signal or the probe: none sent until it is asked again. */
  private signalsRefused(log: Logger | undefined, err: Error): void {
    const s = this.signals;
    s.refused = true;
    s.on = false;
    s.checkedAt = Date.now();
    if (s.told) return;
    s.told = true;
    log?.warn(
      { err: err.message },
      'working signals refused by the NATS server (its configuration is older than the code?): long requests to this service wait their whole time',
    );
  }

  /** Whether an answer may send working signals now; a refusal is checked again after a while. */
  private signalling(nc: NatsConnection, log: Logger): boolean {
    const s = this.signals;
    if (!s.on && !s.probing && Date.now() - s.checkedAt > SIGNALS_REPROBE_MS) void this.probeSignals(nc, log);
    return s.on;
  }

  private subscribe(nc: NatsConnection, h: Handler, log: Logger): void {
    const sub = nc.subscribe(h.subject, {
      queue: this.queue,
      callback: (err, msg) => {
        if (err) return void this.refuse(h, sub, err);
        this.inFlight++;
        answer(h, msg, log, this.signalling(nc, log) ? nc : undefined)
          .catch((e) => log.error({ err: e, subject: h.subject }, 'bus request not answered'))
          .finally(() => this.inFlight--);
      },
    });
    this.subs.set(h, sub);
  }

  /** The server refused a subscription (nats.js closes it): made again by the listener. */
  private refuse(h: Handler, sub: Subscription, err: Error): void {
    if (this.subs.get(h) === sub) this.subs.delete(h);
    this.refused = err;
    if (!this.closing) this.listener?.lost(err);
  }

  /**
   * Disconnections and reconnections of the server's connection, in the service's log; and the
   * subscriptions the server drops when a reload takes their permission away. Its error names the
   * subject but not the queue group, so nats.js leaves a queue subscription open (and deaf): closed here.
   */
  private async watchStatus(nc: NatsConnection, log: Logger | undefined): Promise<void> {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect') log?.warn({ server: s.server }, 'NATS disconnected');
      else if (s.type === 'reconnect') log?.info({ server: s.server }, 'NATS reconnected');
      else if (s.type === 'error') {
        const e = s.error;
        if (e instanceof errors.PermissionViolationError && e.operation === 'publish' && isSignalSubject(e.subject)) {
          this.signalsRefused(log, e);
          continue;
        }
        log?.error({ err: String(s.error) }, 'NATS error');
        if (!(e instanceof errors.PermissionViolationError) || e.operation !== 'subscription') continue;
        for (const [h, sub] of this.subs) {
          if (h.subject !== e.subject) continue;
          sub.unsubscribe();
          this.refuse(h, sub, e);
        }
      }
    }
  }

  async close(): Promise<void> {
    this.closing = true;
    this.listener?.stop();
    const nc = this.nc;
    if (!nc) return;
    // Drained, not dropped: a request the server sent before it saw the unsubscribe is still answered.
    // Bounded: with NATS away the drain's flush would wait for its return.
    const drained = Promise.all([...this.subs.values()].map((sub) => sub.drain().catch(() => undefined)));
    await Promise.race([drained, new Promise((r) => setTimeout(r, SUB_DRAIN_MAX_MS).unref())]);
    this.subs.clear();
    const until = Date.now() + DRAIN_MAX_MS;
    while (this.inFlight > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    this.nc = undefined;
    // Drain sends what is still buffered (the last replies) before it closes.
    await nc.drain().catch(() => nc.close());
  }
}

/** The bus server of a service, in the service's queue group. */
export function createBusServer(conn: string | NatsSettings, queue: string): BusServer {
  return new BusServer(conn, queue);
}

/** Each handler runs in a consumer span continuing the caller's trace, with its input validated. */
export function registerHandlers(server: BusServer, handlers: Handler[], log: Logger): void {
  for (const h of handlers) server.add(h, log);
}

/** What a request carries: Nest's frame, or (from nobody today) a bare payload. */
function unframe(msg: Msg): { data: unknown; id?: string } {
  let wire: unknown;
  try {
    wire = JSON.parse(decoder.decode(msg.data));
  } catch {
    return { data: undefined };
  }
  const w = wire as Partial<WireRequest> | null;
  return w && typeof w === 'object' && 'pattern' in w && 'data' in w ? { data: w.data, id: w.id } : { data: wire };
}

const isSignalSubject = (subject: string) => subject === WORKING_PROBE_SUBJECT || subject.endsWith(WORKING_SUFFIX);

/**
 * Working signals for a request that asks for them, at once and then at its interval until the answer:
 * the caller takes them as signs of life, so it notices this process dying mid-request within its idle
 * time. Returns what stops them.
 */
function startSignals(msg: Msg, nc: NatsConnection | undefined): () => void {
  const asked = nc && msg.reply ? Number(msg.headers?.get(WORKING_HEADER)) : 0;
  if (!nc || !(asked > 0)) return () => undefined;
  const subject = msg.reply + WORKING_SUFFIX;
  const beat = () => {
    try {
      nc.publish(subject);
    } catch {
      // The connection is closing: the caller's idle time runs out, as for a dead answerer.
    }
  };
  beat();
  const timer = setInterval(beat, Math.min(SIGNAL_EVERY_MAX_MS, Math.max(SIGNAL_EVERY_MIN_MS, asked)));
  return () => clearInterval(timer);
}

/**
 * One request: a consumer span continuing the caller's trace, the input validated (the one check of a
 * message on its way in; the receiver of the reply checks the reply), errors mapped to replies.
 * `signals`: the connection working signals go out on, when this service may send them.
 */
async function answer(h: Handler, msg: Msg, log: Logger, signals?: NatsConnection): Promise<void> {
  const parent = extractTraceContext(msg.headers);
  const span = tracer().startSpan(
    `${h.subject} process`,
    { kind: SpanKind.CONSUMER, attributes: { 'messaging.system': 'nats', 'messaging.destination.name': h.subject } },
    parent,
  );
  const { data, id } = unframe(msg);
  let reply: BusReply;
  // Started here, next to the `finally` that stops them: signals that outlived their request would keep
  // its caller waiting for good.
  const stopSignals = startSignals(msg, signals);
  try {
    reply = await context.with(trace.setSpan(parent, span), () => run(h, data, span, log));
  } finally {
    stopSignals();
    span.end();
  }
  // An answer JSON cannot carry (a BigInt, a cycle) or NATS cannot carry (over max_payload) is a bug of
  // the handler: a 500 with its id for the caller, not a timeout.
  const failed = (err: unknown, what: string) => {
    const errorId = newId('err_');
    log.error({ err, error_id: errorId, subject: h.subject }, what);
    return encode({
      response: { ok: false, error: { kind: 'internal', message: `Unexpected error! ID: ${errorId}` } },
      isDisposed: true,
      id,
    } satisfies WireReply);
  };
  let body: Uint8Array;
  try {
    body = encode({ response: reply, isDisposed: true, id } satisfies WireReply);
  } catch (err) {
    body = failed(err, 'handler answer not serializable');
  }
  try {
    try {
      msg.respond(body);
    } catch (err) {
      if (!/max_payload/.test((err as Error).message)) throw err;
      msg.respond(failed(err, 'handler answer larger than max_payload'));
    }
  } catch (err) {
    // The connection is closed or draining: the caller times out (a 503 it may retry).
    log.warn({ err: (err as Error).message, subject: h.subject }, 'bus reply not sent');
  }
}

async function run(h: Handler, data: unknown, span: Span, log: Logger): Promise<BusReply> {
  try {
    const input = h.request.safeParse(data);
    if (!input.success) {
      const issues = input.error.issues.map((i) => ({
        field: i.path.map((x) => (typeof x === 'symbol' ? String(x) : x)),
        msg: i.message,
        type: i.code,
        in: 'message' as const,
      }));
      return { ok: false, error: { kind: 'invalid', message: 'The message breaks its contract', issues } };
    }
    const out = await h.handle(input.data);
    // Both ends check a message against its contract: an answer that breaks it is this service's bug (a
    // 500 with an error id here), not a malformed reply for the caller to puzzle over.
    if (h.response) h.response.parse(out);
    return { ok: true, data: out };
  } catch (err) {
    if (err instanceof DomainError) return { ok: false, error: err.toReply() };
    // Nobody reads this answer: the caller answered its client 503 already.
    if (err instanceof CallerGoneError) {
      log.warn({ subject: h.subject }, 'request given up: its caller stopped waiting before it could be committed');
      return { ok: false, error: { kind: 'unavailable', message: 'The request took too long and was not made, please retry' } };
    }
    if (err instanceof BusUnavailableError) {
      log.warn({ err: err.message, subject: h.subject }, 'downstream service unavailable');
      return { ok: false, error: { kind: 'unavailable', message: 'A service needed for this request is not available, please retry' } };
    }
    if (isDbUnavailable(err)) {
      log.warn({ err: (err as Error).message, subject: h.subject }, 'database unavailable');
      return { ok: false, error: { kind: 'unavailable', message: DB_UNAVAILABLE_DETAIL } };
    }
    const id = newId('err_');
    span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
    log.error({ err, error_id: id, subject: h.subject }, 'handler failed');
    return { ok: false, error: { kind: 'internal', message: `Unexpected error! ID: ${id}` } };
  }
}

export interface MessageDef<Req extends z.ZodType = z.ZodType, Rep extends z.ZodType = z.ZodType> {
  subject: string;
  request: Req;
  reply: Rep;
  /** Waits longer than the caller's BUS_TIMEOUT_MS (the answer depends on a remote party). */
  timeoutMs?: number;
}

/**
 * Service-to-service call of a contract message: the request is validated before it leaves (a bug of
 * the caller is its own 500, not an `invalid` reply passed on to a client), the reply when it arrives;
 * an error reply is raised as the DomainError it was.
 */
export async function callMessage<Req extends z.ZodType, Rep extends z.ZodType>(
  bus: BusClient,
  msg: MessageDef<Req, Rep>,
  payload: z.input<Req>,
): Promise<z.output<Rep>> {
  const reply = await bus.request(msg.subject, msg.request.parse(payload), msg.timeoutMs);
  if (!reply.ok) throw new DomainError(reply.error.kind, reply.error.message, reply.error.issues);
  return msg.reply.parse(reply.data);
}

/** The answering side of a contract message. */
export function messageHandler<Req extends z.ZodType, Rep extends z.ZodType>(
  msg: MessageDef<Req, Rep>,
  handle: (input: z.output<Req>) => Promise<z.input<Rep>>,
): Handler {
  return defineHandler({ subject: msg.subject, request: msg.request, response: msg.reply, handle });
}
