import { context, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { ClientNats, NatsRecordBuilder, ServerNats, type NatsContext } from '@nestjs/microservices';
import { firstValueFrom, timeout, TimeoutError } from 'rxjs';
import { BusReply, type z } from '@sb/contracts';
import { isDbUnavailable } from './db.js';
import { DomainError } from './errors.js';
import { newId } from './ids.js';
import type { Logger } from './logger.js';
import { natsOptions, type NatsSettings } from './nats.js';
import { extractTraceContext, injectTraceHeaders, tracer } from './telemetry.js';

/**
 * The request could not be answered: no service listens on the subject (`noResponders`: NATS says so at
 * once), the peer did not answer in time, or the bus itself is unreachable. The gateway answers 503.
 */
export class BusUnavailableError extends Error {
  constructor(
    message: string,
    readonly noResponders = false,
  ) {
    super(message);
  }
}

/** How long a bus request waits: a route's own wait lengthens BUS_TIMEOUT_MS, never shortens it. */
export const busWaitMs = (busTimeoutMs: number, routeTimeoutMs?: number): number => Math.max(busTimeoutMs, routeTimeoutMs ?? 0);

/** Request/reply over NATS through NestJS's client, with the W3C trace context in the message headers. */
export class BusClient {
  private readonly client: ClientNats;

  constructor(
    conn: string | NatsSettings,
    private readonly timeoutMs: number,
    name = 'gateway',
  ) {
    this.client = new ClientNats(natsOptions(conn, name) as ConstructorParameters<typeof ClientNats>[0]);
  }

  connect(): Promise<unknown> {
    return this.client.connect();
  }

  close(): Promise<void> {
    return this.client.close();
  }

  /** True when the NATS server answers a round trip within a second. */
  async reachable(): Promise<boolean> {
    try {
      const nc = this.client.unwrap<{ rtt(): Promise<number> }>();
      return await Promise.race([nc.rtt().then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1000))]);
    } catch {
      return false;
    }
  }

  /** `timeoutMs` lengthens the wait for a request known to be slow; it never shortens BUS_TIMEOUT_MS. */
  request(subject: string, payload: unknown, timeoutMs?: number): Promise<BusReply> {
    return tracer().startActiveSpan(
      `${subject} send`,
      { kind: SpanKind.PRODUCER, attributes: { 'messaging.system': 'nats', 'messaging.destination.name': subject } },
      async (span) => {
        try {
          const h = natsHeaders();
          injectTraceHeaders(h);
          const record = new NatsRecordBuilder(payload).setHeaders(h).build();
          const raw = await firstValueFrom(this.client.send(subject, record).pipe(timeout(busWaitMs(this.timeoutMs, timeoutMs))));
          return BusReply.parse(raw);
        } catch (err) {
          span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
          if (err instanceof TimeoutError) throw new BusUnavailableError(`${subject} timed out`);
          // Nest does not export its EmptyResponseException: NATS's no-responders status arrives as one.
          if ((err as Error)?.constructor?.name === 'EmptyResponseException') throw new BusUnavailableError(`${subject}: no responders`, true);
          // A malformed reply is our own bug (500), unlike a missing peer (503).
          if ((err as Error)?.name === 'ZodError') throw err;
          throw new BusUnavailableError(`${subject}: ${(err as Error).message ?? String(err)}`);
        } finally {
          span.end();
        }
      },
    );
  }
}

/** What a client sees while the database cannot be reached (a 503 with Retry-After). */
export const DB_UNAVAILABLE_DETAIL = 'The database is not available right now, please retry';

/** A bus handler as the server runs it: `handle` is only ever given what `request` parsed. */
export interface Handler {
  subject: string;
  request: z.ZodType;
  /** Validates what the handler answers before it leaves the service. */
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

/** How long a stopping service waits for the requests it is answering (an NWC charge waits up to 45 s). */
const DRAIN_MAX_MS = 60_000;

/**
 * Nest's server stops taking requests on close, then waits a fixed grace period before closing the
 * connection: a reply still being worked on would be lost. This one waits until the requests in flight
 * are answered (at most DRAIN_MAX_MS, within the pod's terminationGracePeriodSeconds of 75 s).
 */
class DrainingServerNats extends ServerNats {
  inFlight = 0;

  override async close(): Promise<void> {
    // Nest keeps its subscriptions private; unsubscribing them first is what its graceful close does too.
    const subs = (this as unknown as { subscriptions?: { unsubscribe(): void }[] }).subscriptions ?? [];
    for (const sub of subs) sub.unsubscribe();
    const until = Date.now() + DRAIN_MAX_MS;
    while (this.inFlight > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    await super.close();
  }
}

/** A NestJS NATS server in the service's queue group, so replicas share the load. */
export function createBusServer(conn: string | NatsSettings, queue: string): ServerNats {
  return new DrainingServerNats({ ...(natsOptions(conn, queue) as object), queue });
}

/** Each handler runs in a consumer span continuing the caller's trace, with its input and output validated. */
export function registerHandlers(server: ServerNats, handlers: Handler[], log: Logger): void {
  for (const h of handlers) {
    server.addHandler(h.subject, async (data: unknown, ctx: NatsContext) => {
      if (server instanceof DrainingServerNats) server.inFlight++;
      try {
        return await answer(h, data, ctx, log);
      } finally {
        if (server instanceof DrainingServerNats) server.inFlight--;
      }
    });
  }
}

/** One request: a consumer span continuing the caller's trace, input and output validated, errors mapped to replies. */
function answer(h: Handler, data: unknown, ctx: NatsContext, log: Logger): Promise<BusReply> {
  const parent = extractTraceContext(ctx.getHeaders());
  return context.with(parent, () =>
    tracer().startActiveSpan(
      `${h.subject} process`,
      { kind: SpanKind.CONSUMER, attributes: { 'messaging.system': 'nats', 'messaging.destination.name': h.subject } },
      async (span): Promise<BusReply> => {
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
          if (h.response) h.response.parse(out);
          return { ok: true, data: out };
        } catch (err) {
          if (err instanceof DomainError) return { ok: false, error: err.toReply() };
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
        } finally {
          span.end();
        }
      },
    ),
  );
}

export interface MessageDef<Req extends z.ZodType = z.ZodType, Rep extends z.ZodType = z.ZodType> {
  subject: string;
  request: Req;
  reply: Rep;
  /** Waits longer than the caller's BUS_TIMEOUT_MS (the answer depends on a remote party). */
  timeoutMs?: number;
}

/**
 * Service-to-service call of a contract message: the request is validated before it leaves, the reply
 * when it arrives; an error reply is raised as the DomainError it was.
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
