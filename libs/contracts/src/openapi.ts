import { OpenAPIRegistry, OpenApiGeneratorV31 } from '@asteasolutions/zod-to-openapi';
import { ErrorBody } from './common.js';
import { API_PREFIX, type RouteDef } from './http.js';
import { routes } from './routes.js';

const ERRORS: Record<string, string> = {
  '400': 'Malformed JSON',
  '401': 'Missing or unknown API key or subscriber token',
  '403': 'Admin key required',
  '404': 'Not found (also for ids of another wallet)',
  '409': 'Illegal state change, duplicate, or Idempotency-Key reused with another body',
  '413': 'Body over 64 KiB',
  '422': 'Validation failed: detail is a list of {loc, msg, type}',
  '429': 'Rate limited; see Retry-After',
  '503': 'A backing service did not answer in time',
};

const SECURITY: Record<RouteDef['auth'], Array<Record<string, string[]>>> = {
  admin: [{ AdminKey: [] }],
  invoice: [{ InvoiceKey: [] }, { AdminKey: [] }],
  subscriber: [{ SubscriberToken: [] }],
  none: [],
};

/** The OpenAPI 3.1 document, generated from the route table: never written by hand. */
export function buildOpenApiDocument(serverUrl = API_PREFIX) {
  const registry = new OpenAPIRegistry();
  registry.registerComponent('securitySchemes', 'AdminKey', { type: 'apiKey', in: 'header', name: 'X-Api-Key' });
  registry.registerComponent('securitySchemes', 'InvoiceKey', { type: 'apiKey', in: 'header', name: 'X-Api-Key' });
  registry.registerComponent('securitySchemes', 'SubscriberToken', { type: 'apiKey', in: 'header', name: 'X-Subscriber-Token' });

  for (const route of routes as readonly RouteDef[]) {
    if (route.devOnly) continue;
    const responses: Record<string, { description: string; content?: Record<string, { schema: any }> }> = {
      [String(route.status ?? 200)]: {
        description: route.summary,
        content: { 'application/json': { schema: route.response } },
      },
    };
    for (const [code, description] of Object.entries(ERRORS)) {
      if (route.auth === 'none' && (code === '401' || code === '403')) continue;
      if (route.method === 'get' && code === '409') continue;
      responses[code] = { description, content: { 'application/json': { schema: ErrorBody } } };
    }
    registry.registerPath({
      operationId: route.id,
      method: route.method,
      path: route.path,
      summary: route.summary,
      security: SECURITY[route.auth],
      request: {
        ...(route.params ? { params: route.params } : {}),
        ...(route.query ? { query: route.query } : {}),
        ...(route.body
          ? { body: { required: !route.bodyOptional, content: { 'application/json': { schema: route.body } } } }
          : {}),
      },
      responses,
    });
  }
  return new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Subscriptions manager',
      version: '1.0.0',
      description: 'Bitcoin-native subscription billing: plans, subscriptions, subscribers and payments.',
    },
    servers: [{ url: serverUrl }],
  });
}
