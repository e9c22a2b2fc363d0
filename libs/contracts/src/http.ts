import type { z } from './zod.js';

export type Auth = 'invoice' | 'admin' | 'subscriber' | 'none';

/** One HTTP route of the API: the gateway serves it and the OpenAPI document describes it from this. */
export interface RouteDef {
  id: string;
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** Relative to `{api}`, with `{name}` path parameters as in the interface spec. */
  path: string;
  auth: Auth;
  summary: string;
  /** Longer prose for the OpenAPI document (what the server does beyond the summary). */
  description?: string;
  params?: z.ZodObject;
  query?: z.ZodObject;
  /** The request body; on a `rawBody` route it only documents what the provider sends (never parsed here). */
  body?: z.ZodType;
  /** Request headers the route reads beyond auth (a provider's signature), for the OpenAPI document. */
  headers?: z.ZodObject;
  /** The body may be absent (cancel takes an optional body). */
  bodyOptional?: boolean;
  /**
   * The body is a form (RFC 8058's one-click POST sends `List-Unsubscribe=One-Click` as
   * multipart/form-data or application/x-www-form-urlencoded): the gateway does not read it, the route acts
   * on its path alone; `body` only documents it.
   */
  formBody?: boolean;
  response: z.ZodType;
  /** HTTP status of a success; 200 unless said. */
  status?: number;
  /**
   * Provider callbacks: the body is passed on untouched as a CallbackRequest (raw bytes and headers), so
   * the service can verify signatures on the exact bytes received.
   */
  rawBody?: boolean;
  /**
   * A URL people open in a browser (a List-Unsubscribe link), and the hosted page it is: a request that
   * prefers HTML to JSON gets a page (the gateway's pages.ts). A GET gets that page, whose script asks the
   * route as JSON (a GET the route refuses with 404 gets a page that says so, no form); any other method
   * (the page's form posted without JavaScript) gets the route's answer in words.
   */
  page?: 'unsubscribe';
  /** Exists only in DEV_MODE (test clock, dev provider); absent from the OpenAPI document. */
  devOnly?: boolean;
  /** The NATS subject that answers it. */
  subject: string;
  /** The gateway waits this long for the answer when it is longer than BUS_TIMEOUT_MS (a remote wallet is asked). */
  busTimeoutMs?: number;
  /** Fields of the answer shown only once (a signing secret): never kept for an Idempotency-Key replay. */
  shownOnce?: readonly string[];
}

export function defineRoutes<const T extends readonly RouteDef[]>(routes: T): T {
  return routes;
}

export const API_PREFIX = '/subscriptions_manager/api/v1';

const pageBase = (base: string) => `${base.replace(/\/$/, '')}/subscriptions_manager`;

/**
 * The plan's hosted checkout page (served by the gateway from web/). With a payment, the page follows
 * that payment: where a card or wallet processor sends the payer back.
 */
export function checkoutPageUrl(base: string, planId: string, paymentId?: string): string {
  const page = `${pageBase(base)}/checkout/${encodeURIComponent(planId)}`;
  return paymentId ? `${page}?payment=${encodeURIComponent(paymentId)}` : page;
}

/**
 * The one-click unsubscribe URL of an e-mail's List-Unsubscribe header (RFC 8058): a POST turns one kind
 * of notice off; a GET shows a page that asks first. `token` is purpose-limited, never the portal's.
 */
export function unsubscribeUrl(base: string, token: string): string {
  return `${base.replace(/\/$/, '')}${API_PREFIX}/public/unsubscribe/${token}`;
}

/** The subscriber portal of the holder of `token`. */
export function managePageUrl(base: string, token: string): string {
  return `${pageBase(base)}/manage?token=${token}`;
}
