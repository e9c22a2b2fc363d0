import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: unknown;
}

/** How the next answers misbehave: a status instead of the real answer, or a delay before answering. */
export interface Faults {
  status?: number;
  delayMs?: number;
  /** A provider that bills this many sats whatever it was asked (its invoices and charges). */
  billsSats?: number;
  /** The error body of `status` instead of FastAPI's (a proxy's page, say). */
  errorBody?: string;
}

export interface FakeServer {
  url: string;
  requests: RecordedRequest[];
  faults: Faults;
  close(): Promise<void>;
}

export type Route = (req: RecordedRequest) => { status: number; body: unknown } | undefined;

/** A loopback HTTP server answering JSON like a FastAPI app (LNbits is one): `{"detail": ...}` errors. */
export async function startFakeServer(route: Route): Promise<FakeServer> {
  const requests: RecordedRequest[] = [];
  const faults: Faults = {};
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (raw += c));
    req.on('end', async () => {
      let body: unknown;
      try {
        body = raw ? JSON.parse(raw) : undefined;
      } catch {
        return send(res, 400, { detail: 'JSON decode error' });
      }
      const rec: RecordedRequest = { method: req.method ?? 'GET', path: (req.url ?? '/').split('?')[0]!, headers: req.headers, body };
      requests.push(rec);
      if (faults.delayMs) await new Promise((r) => setTimeout(r, faults.delayMs));
      if (faults.status && faults.errorBody !== undefined) {
        res.writeHead(faults.status, { 'content-type': 'text/html' }).end(faults.errorBody);
        return;
      }
      if (faults.status) return send(res, faults.status, { detail: 'Internal Server Error' });
      const out = route(rec) ?? { status: 404, body: { detail: 'Not Found' } };
      send(res, out.status, out.body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    faults,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.destroyed) return;
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

export const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

/**
 * A 200 whose body starts with `start` and then stops coming (`stall`) or never ends (`endless`): a
 * provider's answer that a bounded read must give up on.
 */
export function brokenBody(res: ServerResponse, start: string, kind: 'stall' | 'endless'): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.write(start);
  if (kind === 'stall') return;
  const chunk = ' '.repeat(64 * 1024);
  const more = () => {
    while (!res.destroyed && res.write(chunk));
    if (!res.destroyed) res.once('drain', more);
  };
  res.on('error', () => undefined);
  more();
}
