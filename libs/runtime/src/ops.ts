import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { SettingError } from './config.js';

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
export function startOpsServer(port: number, registry: Registry, ready: ReadinessCheck, variable = 'ops port'): Promise<Server> {
  const handle = opsHandler(registry, ready);
  const server = createServer((req, res) => {
    handle(req, res).then(
      (done) => {
        if (!done) send(res, 404, { detail: 'Not Found' });
      },
      () => send(res, 500, { detail: 'ops handler failed' }),
    );
  });
  return listen(server, port, '0.0.0.0', variable).then(() => server);
}

/**
 * `server.listen`, where a port taken by another process (or not ours to take) is a failed start naming
 * the variable that chose it, not an uncaught 'error' event with a stack.
 */
export function listen(server: Server, port: number, host: string, variable: string, hostVariable = variable): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') reject(new SettingError(variable, `port ${port} is already in use by another process`));
      else if (err.code === 'EACCES') reject(new SettingError(variable, `port ${port} may not be used by this process`));
      else if (err.code === 'EADDRNOTAVAIL') reject(new SettingError(hostVariable, `address ${host} is not one of this host's`));
      // A name that does not resolve (found from outside: a stack naming no variable).
      else if (err.code === 'ENOTFOUND') reject(new SettingError(hostVariable, `${host} is not an address or a name this host resolves`));
      else if (err.code === 'EAI_AGAIN') reject(new SettingError(hostVariable, `${host} could not be resolved now (the name service did not answer)`));
      else reject(err);
    });
    server.listen(port, host, () => resolve());
  });
}
