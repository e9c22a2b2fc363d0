import { request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { API_PREFIX, type RouteDef, routes } from '@sb/contracts';
import express, { type NextFunction, type Request, type Response } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiMatch, compileApiRoutes } from '../src/api-routes.js';

/**
 * The gateway's one-step route matching against what Express's own routing answered before it, for
 * the real routes and generated paths: the same route, parameters, 405 with Allow, or no match.
 */
const all = routes as readonly RouteDef[];

const answer = (res: Response, route: RouteDef, params: unknown) => res.json({ id: route.id, params });
const tail = (app: express.Express) => {
  app.use((_req: Request, res: Response) => void res.status(404).json({ detail: 'Not Found' }));
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    res.status(err instanceof URIError ? 400 : 500).json({ detail: err instanceof URIError ? 'undecodable' : String(err) });
  });
  return app;
};

/** Express's routing as the gateway registered it before: a route each, then a 405 per path. */
function expressRouting(): express.Express {
  const app = express();
  const methodsOf = new Map<string, string[]>();
  for (const route of all) {
    const path = API_PREFIX + route.path.replace(/\{(\w+)\}/g, ':$1');
    methodsOf.set(path, [...(methodsOf.get(path) ?? []), route.method.toUpperCase()]);
    app[route.method](path, (req, res) => answer(res, route, req.params));
  }
  for (const [path, methods] of methodsOf) {
    const allow = [...methods, ...(methods.includes('GET') ? ['HEAD'] : [])].join(', ');
    app.all(path, (_req, res) => void res.set('Allow', allow).status(405).json({ detail: 'Method Not Allowed' }));
  }
  return tail(app);
}

function ourRouting(): express.Express {
  const app = express();
  const match = compileApiRoutes(API_PREFIX, all);
  app.use((req, res, next) => {
    const m: ApiMatch | undefined = match(req.method, req.path);
    if (!m) return next();
    // Where Express throws (decoding the path before matching the method; the gateway answers a 404 of an
    // id that cannot exist, or a 405 where the method does not match, which Express cannot tell apart).
    if (m.undecodable) return next(new URIError(m.undecodable));
    if (m.kind === 'method_not_allowed') return void res.set('Allow', m.allow).status(405).json({ detail: 'Method Not Allowed' });
    req.params = m.params;
    answer(res, m.route, m.params);
  });
  return tail(app);
}

const servers: Server[] = [];
let ports: [number, number];
beforeAll(async () => {
  const listen = (app: express.Express) =>
    new Promise<number>((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port));
      servers.push(s);
    });
  ports = [await listen(expressRouting()), await listen(ourRouting())];
});
afterAll(() => {
  for (const s of servers) s.close();
});

function ask(port: number, method: string, path: string) {
  return new Promise<{ status: number; allow?: string; body: string }>((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, method, path, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, allow: res.headers.allow, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

// A small deterministic generator: the same cases on every run, a failure can be replayed.
let seed = 12345;
const rand = (n: number) => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed % n;
};
const pick = <T>(xs: readonly T[]): T => xs[rand(xs.length)]!;
const PARAM_PIECES = [
  'plan_1',
  'abc',
  'A.B',
  '%2F',
  '%41',
  '%E2%82%AC',
  '%ZZ',
  '%',
  '%E0%A4%A',
  '+',
  '~x',
  'export',
  'archive',
  "'",
  '(1)',
  'pause',
  'deliveries',
  '..',
  '.',
];
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'];

function mutateCase(s: string): string {
  return [...s].map((ch) => (rand(4) === 0 ? ch.toUpperCase() : ch)).join('');
}

function generatedPath(): string {
  const route = pick(all);
  let path = route.path.replace(/\{\w+\}/g, () => Array.from({ length: 1 + rand(2) }, () => pick(PARAM_PIECES)).join(''));
  switch (rand(8)) {
    case 0:
      path = mutateCase(path);
      break;
    case 1:
      path += '/';
      break;
    case 2:
      path += '//';
      break;
    case 3:
      path += `/${pick(PARAM_PIECES)}`;
      break;
    case 4:
      path = path.replace(/\/[^/]*$/, '');
      break;
    case 5:
      path = path.replace('/', '//');
      break;
    case 6:
      path += `?q=${pick(PARAM_PIECES)}`;
      break;
  }
  const prefix = rand(10) === 0 ? mutateCase(API_PREFIX) : rand(20) === 0 ? API_PREFIX.slice(0, -1) : API_PREFIX;
  return prefix + path;
}

describe('API route matching', () => {
  it('answers as Express did for every route, asked as written', async () => {
    for (const route of all) {
      const path = API_PREFIX + route.path.replace(/\{(\w+)\}/g, 'x_$1');
      const [a, b] = await Promise.all(ports.map((p) => ask(p, route.method.toUpperCase(), path)));
      expect(b, `${route.method} ${path}`).toEqual(a);
      expect(JSON.parse(b!.body).id).toBe(route.id);
    }
  });

  it('answers as Express did for 3,000 generated requests: case, slashes, encodings, methods, unknown paths', async () => {
    const kinds = new Set<number>();
    for (let i = 0; i < 3000; i++) {
      const method = pick(METHODS);
      const path = generatedPath();
      const [a, b] = await Promise.all(ports.map((p) => ask(p, method, path)));
      expect(b, `${method} ${path}`).toEqual(a);
      kinds.add(a!.status);
    }
    // The cases reach every outcome: a route, 405, no route, a parameter that does not decode.
    expect([...kinds].sort()).toEqual([200, 400, 404, 405]);
  });
});
