import { busRequestOf, type BusRequest, type RouteDef, routes } from '@sb/contracts';
import { defineHandler, type Handler } from './bus.js';

export type RouteId = (typeof routes)[number]['id'];

/** A handler for the subject of an HTTP route, its request and reply checked against that route's contract. */
export function routeHandler(id: RouteId, handle: (req: BusRequest<any, any, any>) => Promise<unknown>): Handler {
  const route = (routes as readonly RouteDef[]).find((r) => r.id === id);
  if (!route) throw new Error(`no route ${id}`);
  return defineHandler({ subject: route.subject, request: busRequestOf(route), response: route.response, handle });
}

/** Owner routes always carry the wallet the gateway resolved from the API key. */
export function walletOf(req: BusRequest): string {
  const w = req.caller.wallet_id;
  if (!w) throw new Error('owner route called without a wallet');
  return w;
}
