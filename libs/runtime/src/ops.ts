import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { collectDefaultMetrics, Registry } from 'prom-client';

export function createMetricsRegistry(service: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: registry });
  return registry;
}

export type ReadinessCheck = () => Promise<Record<string, boolean>>;

/** `/healthz` (alive), `/readyz` (dependencies reachable), `/metrics` (Prometheus), as one request handler. */
export function opsHandler(registry: Registry, ready: ReadinessCheck) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<boolean> => {
    const path = (req.url ?? '').split('?')[0];
    if (path === '/healthz') {
      send(res, 200, { status: 'ok' });
    } else if (path === '/readyz') {
      const checks = await ready();
      const ok = Object.values(checks).every(Boolean);
      send(res, ok ? 200 : 503, { status: ok ? 'ready' : 'not ready', checks });
    } else if (path === '/metrics') {
      res.writeHead(200, { 'content-type': registry.contentType });
      res.end(await registry.metrics());
    } else {
      return false;
    }
    return true;
  };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** For services with no HTTP API of their own. */
export function startOpsServer(port: number, registry: Registry, ready: ReadinessCheck): Promise<Server> {
  const handle = opsHandler(registry, ready);
  const server = createServer((req, res) => {
    handle(req, res).then(
      (done) => {
        if (!done) send(res, 404, { detail: 'Not Found' });
      },
      () => send(res, 500, { detail: 'ops handler failed' }),
    );
  });
  // A port taken by another process is a failed start, reported as such (not an uncaught 'error').
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '0.0.0.0', () => resolve(server));
  });
}
