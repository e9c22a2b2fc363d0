import { busRequestOf, type Caller, type CallbackRequest, type RouteDef, routes, type z } from '@sb/contracts';
import { defineHandler, type Handler } from './bus.js';
import { withCallerDeadline } from './deadline.js';

type Route = (typeof routes)[number];
export type RouteId = Route['id'];
type RouteOf<I extends RouteId> = Extract<Route, { id: I }>;

type SchemaOut<R, K extends string> = R extends { [P in K]: infer S extends z.ZodType } ? z.output<S> : Record<never, never>;
type BodyOf<R> = R extends { rawBody: true }
  ? CallbackRequest
  : R extends { body: infer S extends z.ZodType }
    ? R extends { bodyOptional: true }
      ? z.output<S> | undefined
      : z.output<S>
    : undefined;

/** What a route's handler receives: the caller and the path, query and body its contract validated. */
export interface RouteRequest<I extends RouteId> {
  caller: Caller;
  params: SchemaOut<RouteOf<I>, 'params'>;
  query: SchemaOut<RouteOf<I>, 'query'>;
  body: BodyOf<RouteOf<I>>;
}
/** What a route's handler answers: anything its response schema accepts. */
export type RouteReply<I extends RouteId> = z.input<RouteOf<I>['response']>;

/** A handler for the subject of an HTTP route, its request and reply typed and checked by that route's contract. */
export function routeHandler<I extends RouteId>(id: I, handle: (req: RouteRequest<I>) => Promise<RouteReply<I>>): Handler {
  const route = (routes as readonly RouteDef[]).find((r) => r.id === id);
  if (!route) throw new Error(`no route ${id}`);
  return defineHandler({
    subject: route.subject,
    request: busRequestOf(route),
    response: route.response,
    // The request schema is the route's own, so what it parsed is the RouteRequest the types describe.
    handle: heldToDeadline(route)
      ? (req) => withCallerDeadline((req as RouteRequest<I>).caller.answer_by, () => handle(req as RouteRequest<I>))
      : (req) => handle(req as RouteRequest<I>),
  });
}

/**
 * Whether a route's request is given up once its caller stopped waiting (withCallerDeadline): a POST or
 * PATCH, whose retry would do it again. Not a PUT or DELETE (the same state again: a plan archive of
 * thousands of subscriptions can outlast the wait, and its retry goes on from what it committed; found
 * in review), a provider's callback (a fact it tells, recorded whenever it can be), nor a route with a
 * wait of its own (a wallet's or a mail server's answer after the wait must still be recorded).
 */
const heldToDeadline = (route: RouteDef): boolean =>
  (route.method === 'post' || route.method === 'patch') && !route.rawBody && route.busTimeoutMs === undefined;

/** Owner routes always carry the wallet the gateway resolved from the API key. */
export function walletOf(req: { caller: Caller }): string {
  const w = req.caller.wallet_id;
  if (!w) throw new Error('owner route called without a wallet');
  return w;
}
