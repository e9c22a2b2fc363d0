import { OpenAPIRegistry, OpenApiGeneratorV31, type ResponseConfig } from '@asteasolutions/zod-to-openapi';
import { z } from './zod.js';
import { ErrorBody } from './common.js';
import { EventName, eventSchema } from './events.js';
import { API_PREFIX, type RouteDef } from './http.js';
import { routes } from './routes.js';

const retryAfter = { 'Retry-After': { description: 'Seconds to wait before retrying', schema: { type: 'integer' as const, minimum: 0 } } };

/** Error answers every operation may give (some only for some auth kinds or methods, see errorsOf). */
const ERRORS: Record<string, { description: string; headers?: typeof retryAfter }> = {
  '400': { description: 'Malformed JSON, or a body the server cannot read' },
  '401': { description: 'Missing or unknown API key or subscriber token' },
  '403': { description: 'Admin key required' },
  '404': { description: 'Not found: also ids of another wallet, and ids that cannot exist (NUL, unpaired surrogates)' },
  '409': { description: 'Illegal state change, duplicate, or Idempotency-Key reused with another request or still in progress' },
  '413': { description: 'Body over 64 KiB' },
  '415': { description: 'Body in a charset or content encoding the server does not read' },
  '422': {
    description:
      'Validation failed: detail is a list of {loc, msg, type}. Also text with NUL characters or unpaired surrogates anywhere ' +
      '(query, body, metadata keys), and JSON nested deeper than 32 levels, whether or not the route reads the body',
  },
  '429': { description: 'Rate limited', headers: retryAfter },
  '431': { description: 'Request headers or URL too large (answered before any route, with the same error body)' },
  '500': { description: 'Unexpected error; detail names an error id to report (`Unexpected error! ID: err_...`)' },
  '503': { description: 'A backing service is not running or did not answer in time, or a provider is unreachable', headers: retryAfter },
};

function errorsOf(route: RouteDef): string[] {
  return Object.keys(ERRORS).filter((code) => {
    if (code === '401') return route.auth !== 'none';
    if (code === '403') return route.auth === 'admin';
    if (code === '409') return route.method !== 'get';
    return true;
  });
}

const SECURITY: Record<RouteDef['auth'], Array<Record<string, string[]>>> = {
  admin: [{ AdminKey: [] }],
  invoice: [{ InvoiceKey: [] }, { AdminKey: [] }],
  subscriber: [{ SubscriberToken: [] }],
  none: [],
};

const AUTH_TEXT: Record<RouteDef['auth'], string> = {
  admin: 'Needs the admin key.',
  invoice: 'Needs the invoice key (or the admin key).',
  subscriber: "Needs the subscriber's portal token (X-Subscriber-Token).",
  none: 'No authentication.',
};

/** Tags by the path's leading segments; a route under a prefix not listed here gets a tag named after it. */
const TAGS: Array<{ prefix: string; name: string; description: string }> = [
  { prefix: '/public/manage', name: 'Portal', description: "The subscriber's self-service portal (X-Subscriber-Token)" },
  { prefix: '/public/webhook', name: 'Provider callbacks', description: 'Incoming payment confirmations from the providers, verified by the server' },
  { prefix: '/public', name: 'Public', description: 'Checkout pages: public plans, subscribe, payment status, NWC (no authentication)' },
  { prefix: '/plans', name: 'Plans', description: "The wallet's plans" },
  { prefix: '/subscriptions', name: 'Subscriptions', description: 'Subscriptions and their lifecycle actions' },
  { prefix: '/subscribers', name: 'Subscribers', description: "Subscribers across the wallet's plans" },
  { prefix: '/payments', name: 'Payments', description: 'Payments across subscriptions' },
  { prefix: '/archive', name: 'Archive', description: 'Archived plans and ended subscriptions' },
  { prefix: '/watchonly-wallets', name: 'Watch-only wallets', description: "The owner's on-chain watch-only wallets (extended public keys)" },
  { prefix: '/webhook-endpoints', name: 'Webhook endpoints', description: 'Where outgoing events are delivered, their deliveries and replays' },
];

function tagOf(path: string): { name: string; description: string } {
  const known = TAGS.find((t) => path === t.prefix || path.startsWith(`${t.prefix}/`));
  if (known) return known;
  const first = path.split('/')[1] ?? 'api';
  return { name: first, description: `Operations under /${first}` };
}

const PARAMETER_TEXT: Record<string, string> = {
  id: 'Id of the resource (of the authenticated wallet; any other id is 404)',
  delivery_id: 'Id of the delivery',
  limit: 'Page size',
  offset: 'Items to skip',
};

const WEBHOOK_HEADERS = z.object({
  'webhook-id': z.string().openapi({ description: 'The event id (`evt_...`), the same on every retry and replay' }),
  'webhook-timestamp': z.string().openapi({ description: 'Unix seconds of this attempt' }),
  'webhook-signature': z.string().openapi({ description: '`v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">` (Standard Webhooks)' }),
});

const IDEMPOTENCY_HEADER = z.object({
  'Idempotency-Key': z.string().min(1).max(255).optional().openapi({
    description: 'Runs the request once: a retry with the same key and request answers the first response (24 h, per wallet)',
  }),
});

/** `plan.archived` -> `PlanArchivedEvent`. */
const eventComponent = (name: string) =>
  `${name
    .split(/[._]/)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join('')}Event`;

/** The OpenAPI 3.1 document, generated from the route table and the event schemas: never written by hand. */
export function buildOpenApiDocument(serverUrl = API_PREFIX) {
  const registry = new OpenAPIRegistry();
  registry.registerComponent('securitySchemes', 'AdminKey', { type: 'apiKey', in: 'header', name: 'X-Api-Key', description: "The wallet's admin key" });
  registry.registerComponent('securitySchemes', 'InvoiceKey', {
    type: 'apiKey',
    in: 'header',
    name: 'X-Api-Key',
    description: "The wallet's invoice (read-only) key",
  });
  registry.registerComponent('securitySchemes', 'SubscriberToken', {
    type: 'apiKey',
    in: 'header',
    name: 'X-Subscriber-Token',
    description: "A subscriber's portal token (from the manage link)",
  });

  const tags = new Map<string, string>();
  for (const route of routes as readonly RouteDef[]) {
    if (route.devOnly) continue;
    const tag = tagOf(route.path);
    tags.set(tag.name, tag.description);
    const responses: Record<string, ResponseConfig> = {
      [String(route.status ?? 200)]: { description: route.summary, content: { 'application/json': { schema: route.response } } },
    };
    for (const code of errorsOf(route)) {
      const e = ERRORS[code]!;
      responses[code] = {
        description: e.description,
        ...(e.headers ? { headers: e.headers } : {}),
        content: { 'application/json': { schema: ErrorBody } },
      };
    }
    const headers = [route.headers, route.method === 'post' || route.method === 'patch' ? IDEMPOTENCY_HEADER : undefined].filter((h): h is z.ZodObject => !!h);
    registry.registerPath({
      operationId: route.id,
      method: route.method,
      path: route.path,
      tags: [tag.name],
      summary: route.summary,
      description: `${route.description ?? `${route.summary}.`} ${AUTH_TEXT[route.auth]}`,
      security: SECURITY[route.auth],
      request: {
        ...(route.params ? { params: route.params } : {}),
        ...(route.query ? { query: route.query } : {}),
        ...(headers.length ? { headers: headers.length === 1 ? headers[0]! : headers[0]!.extend(headers[1]!.shape) } : {}),
        ...(route.body
          ? {
              body: {
                required: !route.bodyOptional,
                content: route.formBody
                  ? { 'multipart/form-data': { schema: route.body }, 'application/x-www-form-urlencoded': { schema: route.body } }
                  : { 'application/json': { schema: route.body } },
              },
            }
          : {}),
      },
      responses,
    });
  }

  for (const name of EventName.options) {
    registry.registerWebhook({
      method: 'post',
      path: name,
      operationId: `event.${name}`,
      tags: ['Events'],
      // The receiver authenticates us by the signature headers, not by a scheme of ours.
      security: [],
      summary: `The ${name} event`,
      description:
        'POSTed to every webhook endpoint of the wallet that takes this event (and plan). Signed per Standard Webhooks; retried ' +
        'with backoff for 3 days until a 2xx answer; redirects are not followed.',
      request: {
        headers: WEBHOOK_HEADERS,
        body: { required: true, content: { 'application/json': { schema: registry.register(eventComponent(name), eventSchema(name)) } } },
      },
      responses: {
        '200': { description: 'Received (any 2xx acknowledges the event)' },
        '4XX': { description: 'A failed attempt, retried later' },
        '5XX': { description: 'A failed attempt, retried later' },
      },
    });
  }
  tags.set('Events', 'Outgoing events, POSTed to the webhook endpoints the owner registered');

  const doc = new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Subscriptions manager',
      version: '1.0.0',
      description:
        'Bitcoin-native subscription billing: plans, subscriptions, subscribers and payments over Lightning, on-chain, card, a ' +
        'wallet processor and Nostr Wallet Connect. Errors are `{"detail": ...}`; every response carries X-Request-Id and X-Trace-Id.',
      license: { name: 'MIT', identifier: 'MIT' },
    },
    servers: [{ url: serverUrl }],
    tags: [...tags].map(([name, description]) => ({ name, description })),
  });
  describeParameters(doc);
  return doc;
}

/** Every parameter says what it is: its schema's description, or a sentence from its name. */
// biome-ignore lint/suspicious/noExplicitAny: the generated OpenAPI document is plain JSON walked field by field.
function describeParameters(doc: { paths?: Record<string, Record<string, any>> }): void {
  for (const item of Object.values(doc.paths ?? {})) {
    for (const op of Object.values(item)) {
      for (const p of (op?.parameters ?? []) as Array<{ name: string; in: string; description?: string; schema?: { description?: string } }>) {
        p.description ??= p.schema?.description ?? PARAMETER_TEXT[p.name] ?? `The ${p.name.replace(/_/g, ' ')} to filter by`;
      }
    }
  }
}
