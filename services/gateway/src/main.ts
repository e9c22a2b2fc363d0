import { createServer, type IncomingMessage, STATUS_CODES, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import {
  DRAIN_MAX_MS,
  BusClient,
  createBusServer,
  configuredDb,
  createLogger,
  createMetricsRegistry,
  DB_UNAVAILABLE_DETAIL,
  guardProcess,
  initTelemetry,
  isDbUnavailable,
  listen,
  main as runMain,
  natsSettingProblem,
  migrateWhenReachable,
  registerHandlers,
  SecretBox,
  shutdownTelemetry,
  stopOnSignals,
} from '@sb/runtime';
import { createApp, headerCount } from './app.js';
import { walletName } from './bus-handlers.js';
import { KeyResolver } from './auth.js';
import { loadGatewayConfig } from './config.js';
import { DEFAULT_WEB_DIR } from './pages.js';
import { RateLimiter } from './domain/rate-limit.js';
import { IdempotencyRepo } from './store/idempotency.repo.js';
import { migrations } from './store/migrations.js';
import { WalletsRepo } from './store/wallets.repo.js';

export const SCHEMA = 'gateway';

async function main(): Promise<void> {
  initTelemetry('gateway');
  const config = loadGatewayConfig();
  const log = createLogger('gateway', config.LOG_LEVEL);
  guardProcess(log);
  const db = configuredDb(config, 'gateway');
  let migrated = false;

  const bus = new BusClient(config, config.BUS_TIMEOUT_MS, 'gateway', log);
  // The gateway starts even while NATS is away: requests answer 503 until it is back.
  // A setting to fix (an unreadable NATS_TLS_CA_FILE) is not waited on: it stops the start, in one line.
  await bus.connect().catch((err) => {
    const setting = natsSettingProblem(err);
    if (setting) throw setting;
    log.warn({ err: String(err) }, 'NATS not reachable yet');
  });

  const limits = {
    perKey: new RateLimiter(config.RATE_LIMIT_KEY_PER_SECOND, 1000),
    publicPost: new RateLimiter(config.RATE_LIMIT_PUBLIC_POST_PER_MINUTE, 60_000),
    publicGet: new RateLimiter(config.RATE_LIMIT_PUBLIC_GET_PER_MINUTE, 60_000),
  };
  const wallets = new WalletsRepo(SCHEMA);
  // Answers the notifier (a wallet's name) once the database is migrated; NATS may come later.
  const answers = createBusServer(config, 'gateway');
  registerHandlers(answers, [walletName(db, wallets)], log);
  const idempotency = new IdempotencyRepo(SCHEMA, new SecretBox(config.SECRETS_KEY, config.SECRETS_KEY_PREVIOUS));
  const registry = createMetricsRegistry('gateway');
  const app = createApp({
    db,
    bus,
    keys: new KeyResolver(db, wallets, config.KEY_CACHE_TTL_MS),
    idempotency,
    limits,
    log,
    registry,
    trustProxy: config.TRUST_PROXY,
    devMode: config.DEV_MODE,
    busTimeoutMs: config.BUS_TIMEOUT_MS,
    webDir: config.WEB_DIR ?? DEFAULT_WEB_DIR,
    ready: async () => ({ database: migrated && (await db.ping()), bus: (await bus.reachable()) && answers.listening }),
  });

  const housekeeping = setInterval(() => {
    for (const l of Object.values(limits)) l.sweep();
    idempotency.purgeExpired(db).catch((err) => log.warn(isDbUnavailable(err) ? { error: (err as Error).message } : { err }, 'idempotency purge failed'));
  }, 60_000);
  housekeeping.unref();

  // Listening before the database answers: /healthz is 200 and /readyz 503 at once; API requests are
  // 503 until the migrations ran.
  // Node's own answers to a missing Host and an unknown Expect have no body: ours carry the JSON error.
  // Draining, each answer closes its connection (those under way when the stop came too), so a keep-alive
  // client reconnects to another replica rather than feeding this one until the drain's time is up.
  let stopping = false;
  const underWay = new Set<ServerResponse>();
  const server: Server = createServer(
    {
      ...app.options,
      requireHostHeader: false,
      requestTimeout: config.HTTP_REQUEST_TIMEOUT_MS,
      headersTimeout: Math.min(config.HTTP_REQUEST_TIMEOUT_MS, 20_000),
      // Node looks for late requests this often (30 s by default, which would be the timeout's real floor).
      connectionsCheckingInterval: Math.min(1000, config.HTTP_REQUEST_TIMEOUT_MS / 4),
    },
    (req, res) => {
      if (stopping) res.setHeader('connection', 'close');
      else {
        underWay.add(res);
        res.once('close', () => underWay.delete(res));
      }
      if (req.httpVersion === '1.1' && !req.headers.host) return void answerJson(res, 400, 'An HTTP/1.1 request needs a Host header');
      // RFC 9112 §3.2: which host was meant is not ours to guess (Node keeps the first).
      if (headerCount(req.rawHeaders, 'host') > 1) return void answerJson(res, 400, 'A request must have one Host header, not more');
      // Kubernetes' readiness of the gateway: able to serve once its migrations ran, and so from then on (an
      // outage later is answered by the gateway itself, a JSON 503, which /readyz reports).
      if (req.url === '/startedz') return void answerJson(res, migrated ? 200 : 503, migrated ? 'started' : 'starting: the database has not answered yet');
      if (migrated || /^\/(healthz|readyz|metrics)(\?|$)/.test(req.url ?? '')) return void app.listener(req, res);
      answerJson(res, 503, DB_UNAVAILABLE_DETAIL, { 'retry-after': '1' });
    },
  );
  server.on('clientError', answerClientError);
  // Without a listener Node closes a CONNECT's connection with no answer at all.
  server.on('connect', (req: IncomingMessage, socket: Duplex) => {
    // The socket is handed over without Node's own error listener: a reset must not end the process.
    socket.on('error', () => socket.destroy());
    const { status, detail, headers } = app.refuseConnect(req.url ?? '', req.headers['x-request-id']);
    answerRaw(socket, status, detail, headers);
  });
  server.on('checkExpectation', (_req, res) => answerJson(res, 417, 'Only "Expect: 100-continue" is supported'));
  await listen(server, config.PORT, config.HOST, 'PORT', 'HOST');
  server.keepAliveTimeout = 65_000;
  log.info({ port: config.PORT }, 'gateway listening');
  // From here, not once ready: a gateway still waiting for its database (which may never come) stops in
  // order too, and with `npm start` gone (SB_PARENT_PID) instead of outliving it.
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'gateway stopping');
    // Requests under way get their answers before the bus closes (at most the longest route's wait, 75 s).
    for (const res of underWay) if (!res.headersSent) res.setHeader('connection', 'close');
    const drained = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    await Promise.race([drained, new Promise((r) => setTimeout(r, DRAIN_MAX_MS).unref())]);
    await answers.close().catch(() => undefined);
    await bus.close().catch(() => undefined);
    await db.close().catch(() => undefined);
    await shutdownTelemetry();
    process.exit(0);
  };
  stopOnSignals((why) => void stop(why));
  await migrateWhenReachable(db, SCHEMA, migrations, log);
  if (stopping) return;
  migrated = true;
  // It keeps trying until it listens (NATS away, a subject auth.conf does not allow yet): /readyz says so meanwhile.
  void answers.listen().catch((err) => log.error({ err }, 'gateway cannot answer bus messages'));
  log.info('gateway ready');
}

runMain('gateway', main);

/** What Node answers a request it cannot read (headers too large, too slow, malformed), with the API's JSON error body. */
const CLIENT_ERRORS: Record<string, [number, string]> = {
  HPE_HEADER_OVERFLOW: [431, 'Request headers (or the URL) are too large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'The request took too long to arrive'],
};

function answerJson(res: ServerResponse, status: number, detail: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify({ detail }));
}

function answerClientError(err: Error & { code?: string }, socket: Duplex & { _httpMessage?: { headersSent?: boolean } }): void {
  // As Node's own handler: nothing more on a socket that is gone or already carries an answer.
  if (err.code === 'ECONNRESET' || !socket.writable || socket._httpMessage?.headersSent) return void socket.destroy();
  const [status, detail] = CLIENT_ERRORS[err.code ?? ''] ?? [400, 'The request could not be read as HTTP'];
  answerRaw(socket, status, detail);
}

/** The JSON error answer written on a connection Node has no response object for; the connection then closes. */
function answerRaw(socket: Duplex, status: number, detail: string, headers: Record<string, string> = {}): void {
  const body = JSON.stringify({ detail });
  const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\n${extra.join('')}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
