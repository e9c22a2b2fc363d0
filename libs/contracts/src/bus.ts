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

/** Every reply on the bus: a result, or an error with the HTTP status and detail the gateway relays. */
export const BusReply = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), data: z.unknown() }),
  z.object({ ok: z.literal(false), status: z.number().int(), detail: z.unknown() }),
]);
export type BusReply = z.infer<typeof BusReply>;

/** Request/reply subjects are `<service>.<resource>.<verb>`; each service answers in its own queue group. */
export const QUEUE_GROUPS = { billing: 'billing', payments: 'payments', nwc: 'nwc', notifier: 'notifier' } as const;

/** Domain events go to this JetStream stream on `events.<event name>`. */
export const EVENTS_STREAM = 'EVENTS';
export const EVENTS_SUBJECT_PREFIX = 'events.';
