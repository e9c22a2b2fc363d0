import { z } from './zod.js';
import type { RouteDef } from './http.js';
import { EmptyObject } from './common.js';
import { CallbackRequest } from './payments.js';

/**
 * What the gateway sends on a route's subject: who is calling (resolved by the gateway, never taken
 * from the client) and the already validated path, query and body.
 */
export const Caller = z.object({
  wallet_id: z.string().optional(),
  role: z.enum(['admin', 'invoice']).optional(),
  /** SHA-256 hex of the X-Subscriber-Token header; the service owning subscribers resolves it. */
  subscriber_token_hash: z.string().optional(),
  /**
   * SHA-256 hex of the caller's scope and `Idempotency-Key` header: a service whose effect must not
   * double when the gateway runs a request again (its first answer was lost) keys the effect by it.
   */
  idempotency_key: z.string().optional(),
  /**
   * Until when (Unix ms) the gateway waits for the answer (set on routes with a wait of their own): a
   * service that must answer in time counts to it, not to its own BUS_TIMEOUT_MS, and does not start
   * what its caller has already given up on (a request held in a queue while the service hung).
   */
  answer_by: z.number().int().positive().optional(),
});
export type Caller = z.infer<typeof Caller>;

export function busRequestOf(route: RouteDef) {
  const body = route.rawBody ? CallbackRequest : route.body ? (route.bodyOptional ? route.body.optional() : route.body) : z.undefined().optional();
  return z.object({ caller: Caller, params: route.params ?? EmptyObject, query: route.query ?? EmptyObject, body });
}
export type BusRequest<P = unknown, Q = unknown, B = unknown> = {
  caller: Caller;
  params: P;
  query: Q;
  body: B;
};

/**
 * What went wrong, in the domain's words. Only the gateway maps a kind to an HTTP status
 * (services/gateway/src/errors.ts); services never speak HTTP to each other.
 */
export const ERROR_KINDS = ['invalid', 'unauthenticated', 'rejected', 'not_found', 'conflict', 'unavailable', 'internal'] as const;
export const ErrorKind = z.enum(ERROR_KINDS);
export type ErrorKind = z.infer<typeof ErrorKind>;

/** A field at fault: its path inside the request body, what is wrong, and a machine-readable type. */
export const FieldIssue = z.object({
  field: z.array(z.union([z.string(), z.number()])),
  msg: z.string(),
  type: z.string(),
  /** Where the field is when not in the body: a bus message that broke its contract says 'message'. */
  in: z.enum(['body', 'query', 'path', 'message']).optional(),
});
export type FieldIssue = z.infer<typeof FieldIssue>;

export const BusErrorReply = z.object({
  ok: z.literal(false),
  error: z.object({ kind: ErrorKind, message: z.string(), issues: z.array(FieldIssue).optional() }),
});
export type BusErrorReply = z.infer<typeof BusErrorReply>;

/** Every reply on the bus: a result, or a domain error. */
export const BusReply = z.discriminatedUnion('ok', [z.object({ ok: z.literal(true), data: z.unknown() }), BusErrorReply]);
export type BusReply = z.infer<typeof BusReply>;

/**
 * Working signals: a request whose caller waits long (a route or message with a wait of its own) carries
 * this header, its value the interval in ms at which the caller wants to hear that its answerer is still
 * at work. The answerer then publishes an empty message on `<reply subject>` + WORKING_SUFFIX at once and
 * at that interval until it answers, so that a caller notices a dead answerer (or a request lost with a
 * NATS server) within its default wait, not at the end of the long one.
 */
export const WORKING_HEADER = 'Sb-Working';
export const WORKING_SUFFIX = '.w';
/**
 * Published (to nobody) by an answerer to learn whether the NATS configuration lets it send working
 * signals: allowed in the same generated configuration as the signals themselves, refused by an older one.
 */
export const WORKING_PROBE_SUBJECT = '_SB.working.probe';

/** Request/reply subjects are `<service>.<resource>.<verb>`; each service answers in its own queue group. */
export const QUEUE_GROUPS = { billing: 'billing', payments: 'payments', nwc: 'nwc', notifier: 'notifier' } as const;

/** Domain events go to this JetStream stream on `events.<event name>`. */
export const EVENTS_STREAM = 'EVENTS';
export const EVENTS_SUBJECT_PREFIX = 'events.';
