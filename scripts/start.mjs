// `npm start`: the whole system on one machine. Uses DATABASE_URL and NATS_URL when set; otherwise an
// embedded PostgreSQL (PGlite, data in .data/pglite) and a nats-server from the PATH (data in .data/nats).
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { acquireLock, dataDir } from './start-lock.mjs';
import { createServer } from 'node:net';
import { z } from 'zod';
import { join } from 'node:path';
import { dbRolePrefix, dbUrlVar, provisionDbRoles } from './db-roles.mjs';
import { servePglite } from './pglite-server.mjs';
import { API_PREFIX, ROOT, createWallet, walletCli, findNatsServer, startNats, startService } from './stack.mjs';
import { supervise } from './supervise.mjs';
import { envPort, loadConfig, natsUrl, postgresUrl, setOnly } from '@sb/runtime';

/** A failure `npm start` can say in its own words: printed as one line, without a stack. */
class StartError extends Error {}

// What this script reads itself, checked before anything starts, one line per bad variable (as each
// service checks its own): a PORT of "abc" would otherwise surface as a bad PUBLIC_BASE_URL. An empty
// value is unset (setOnly), as for the services: an empty DATABASE_URL or NATS_URL is the embedded
// database and a private nats-server.
const PORTS = { PORT: 8080, BILLING_OPS_PORT: 9101, PAYMENTS_OPS_PORT: 9102, NWC_OPS_PORT: 9103, NOTIFIER_OPS_PORT: 9104 };
const settings = loadConfig({
  ...Object.fromEntries(Object.entries(PORTS).map(([name, port]) => [name, envPort(port)])),
  // Unset or 0: a port the kernel chooses.
  PGLITE_PORT: z.coerce.number({ error: 'must be a port number from 0 to 65535' }).int().min(0).max(65535).default(0),
  DATABASE_URL: postgresUrl.optional(),
  NATS_URL: natsUrl.optional(),
});
/** The ports the gateway and the services will listen on: not to be given to PGlite or nats-server. */
const takenLater = Object.keys(PORTS).map((name) => settings[name]);
/** A variable of ours, empty taken as unset. */
const given = (name) => setOnly(process.env)[name];

/**
 * Every port a child will listen on is free, and each its own, before anything starts: found from
 * outside, a PORT another server held ended in "API ready" with demo keys that server refused, its
 * answers taken for the gateway's readiness.
 */
async function checkPorts() {
  const wanted = [...Object.keys(PORTS), ...(settings.PGLITE_PORT && !settings.DATABASE_URL ? ['PGLITE_PORT'] : [])];
  for (const [i, name] of wanted.entries()) {
    const other = wanted.slice(0, i).find((o) => settings[o] === settings[name]);
    if (other) throw new StartError(`${name}: port ${settings[name]} is ${other}'s too; give each its own`);
    const free = await new Promise((resolve) => {
      const probe = createServer();
      probe.once('error', (err) => resolve(err.code));
      // Where the child will listen: the gateway on HOST, the others on every address.
      probe.listen(settings[name], (name === 'PORT' && given('HOST')) || '0.0.0.0', () => probe.close(() => resolve(true)));
    });
    if (free === 'EADDRINUSE') throw new StartError(`${name}: port ${settings[name]} is already in use by another process`);
    // The gateway's address, not its port, is what cannot be had (review: blamed on PORT).
    const host = given('HOST');
    if (name === 'PORT' && host && free === 'EADDRNOTAVAIL') throw new StartError(`HOST: address ${host} is not one of this host's`);
    if (name === 'PORT' && host && (free === 'ENOTFOUND' || free === 'EAI_AGAIN')) throw new StartError(`HOST: ${host} could not be resolved (${free})`);
    if (free !== true) throw new StartError(`${name}: port ${settings[name]} cannot be listened on (${free})`);
  }
}

const DATA = dataDir();
/** What shutdown stops, last started first: `[name, stop]`. */
const stops = [];
let stopping = false;
let lock;
/** How long one step of the shutdown may take, and the whole of it: Ctrl-C always ends `npm start`. */
const STOP_STEP_MS = 10_000;
const SHUTDOWN_MS = 45_000;

// However this process ends (shutdown, an error, or nothing left to run), a start that held the lock
// leaves neither it nor runtime.json behind: the wallet tool would send its commands to a dead address.
process.on('exit', () => {
  if (!lock) return;
  rmSync(join(DATA, 'runtime.json'), { force: true });
  lock.release();
});

/** True when `promise` settles (either way) within `ms`. */
function settlesWithin(promise, ms) {
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const settled = promise.then(
    () => true,
    () => true,
  );
  return Promise.race([settled, late]).finally(() => clearTimeout(timer));
}

async function shutdown(code = 0) {
  if (stopping) return;
  stopping = true;
  // Referenced on purpose: a stop that never settles must not let the process end before the cleanup.
  setTimeout(() => {
    console.error(`[start] shutdown took over ${SHUTDOWN_MS / 1000} s; exiting anyway`);
    process.exit(code);
  }, SHUTDOWN_MS);
  for (const [name, stop] of stops.reverse()) {
    if (!(await settlesWithin(stop(), STOP_STEP_MS))) console.error(`[start] ${name} did not stop within ${STOP_STEP_MS / 1000} s; going on`);
  }
  process.exit(code);
}
// Ctrl-C, `kill`, and a closed terminal (SIGHUP) stop everything; so does the end of whoever started us
// (`npm start` killed outright): the services watch this process the same way (SB_PARENT_PID).
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => void shutdown(0));
const parentAtStart = process.ppid;
setInterval(() => process.ppid !== parentAtStart && void shutdown(0), 1000).unref();

/** The local run keeps one generated key in .data so portal tokens sealed earlier still open. */
function localSecretsKey() {
  const file = join(DATA, 'secrets-key');
  if (!existsSync(file)) writeFileSync(file, randomBytes(32).toString('hex'), { mode: 0o600 });
  return readFileSync(file, 'utf8').trim();
}

async function embeddedPostgres() {
  const { PGlite } = await import('@electric-sql/pglite');
  const dir = join(DATA, 'pglite');
  mkdirSync(dir, { recursive: true });
  const db = await PGlite.create(dir);
  let server = await servePglite(db, { port: settings.PGLITE_PORT });
  // A port the kernel chose that a service is told to listen on later: another one.
  for (let i = 0; !settings.PGLITE_PORT && takenLater.includes(server.port) && i < 20; i++) {
    await server.stop();
    server = await servePglite(db, { port: 0 });
  }
  stops.push([
    'embedded PostgreSQL',
    async () => {
      await server.stop();
      await db.close();
    },
  ]);
  return `postgres://postgres@127.0.0.1:${server.port}/postgres?sslmode=disable`;
}

async function main() {
  mkdirSync(DATA, { recursive: true });
  lock = acquireLock(DATA);
  // Nothing of the running stack's (its runtime.json included) is touched.
  if (!lock) process.exit(1);
  await checkPorts();
  const env = {
    SB_PARENT_PID: String(process.pid),
    DEV_MODE: '1',
    // Every rail on its dev provider (no money moves; paid with `npm run dev -- pay <payment id>`).
    LIGHTNING_PROVIDER: given('LIGHTNING_PROVIDER') ?? 'dev',
    ONCHAIN_PROVIDER: given('ONCHAIN_PROVIDER') ?? 'dev',
    CARDPROC_PROVIDER: given('CARDPROC_PROVIDER') ?? 'dev',
    WALLETPROC_PROVIDER: given('WALLETPROC_PROVIDER') ?? 'dev',
    FIAT_CURRENCY: given('FIAT_CURRENCY') ?? 'usd',
    ...(given('FIAT_RATE_URL') ? { FIAT_RATE_URL: given('FIAT_RATE_URL') } : { FIAT_RATE_FIXED: given('FIAT_RATE_FIXED') ?? '100000' }),
    PUBLIC_BASE_URL: given('PUBLIC_BASE_URL') ?? `http://127.0.0.1:${settings.PORT}`,
    // A local development relay is allowed (never in production).
    NWC_ALLOW_PRIVATE_RELAYS: given('NWC_ALLOW_PRIVATE_RELAYS') ?? '1',
    LOG_LEVEL: given('LOG_LEVEL') ?? 'info',
    SCHEDULER_INTERVAL_MS: given('SCHEDULER_INTERVAL_MS') ?? '1000',
    SECRETS_KEY: given('SECRETS_KEY') ?? localSecretsKey(),
  };

  let databaseUrl = settings.DATABASE_URL;
  if (!databaseUrl) {
    databaseUrl = await embeddedPostgres();
    console.log(`embedded PostgreSQL (PGlite) serving ${join(DATA, 'pglite')} at ${databaseUrl}`);
    // PGlite serves every client on its one session, where the statement names each process gives
    // (sb0, sb1, ...) would collide.
    env.DB_PREPARED_STATEMENTS = '0';
  }
  writeFileSync(join(DATA, 'runtime.json'), JSON.stringify({ DATABASE_URL: databaseUrl, pid: process.pid }));
  // A real PostgreSQL: one role per service, its own schema only. The embedded PGlite serves every client
  // on its one session as one user, so roles could not be told apart there (see the README's Decisions).
  const serviceDbUrls = {};
  if (process.env.DATABASE_URL && process.env.DB_ROLES !== '0') {
    // Roles are the server's, databases share them: named after this database, so that a start against
    // another database of the same server never changes this one's passwords.
    const prefix = dbRolePrefix(databaseUrl);
    const urls = await provisionDbRoles(databaseUrl, { prefix }).catch((err) => {
      throw new StartError(`DATABASE_URL: ${err.message} (at ${new URL(databaseUrl).host})`);
    });
    for (const [service, url] of Object.entries(urls)) serviceDbUrls[dbUrlVar(service)] = url;
    console.log(`PostgreSQL roles ${prefix}<service> provisioned (new passwords each start; DB_ROLES=0 skips)`);
  }
  const natsCredentials = {};

  let natsUrl = settings.NATS_URL;
  if (!natsUrl) {
    if (!findNatsServer()) {
      console.error(
        'No NATS server: set NATS_URL to a running server with JetStream, or install nats-server\n' +
          '(Debian/Ubuntu: apt-get install nats-server; others: https://docs.nats.io/running-a-nats-service/introduction/installation).',
      );
      return shutdown(1);
    }
    // The production shape: each service its own NATS user with the subjects the contracts give it.
    const nats = await startNats(join(DATA, 'nats'), { secure: true, avoid: takenLater });
    lock.track('nats-server', nats.child.pid);
    const restartNats = async () => {
      const again = await startNats(join(DATA, 'nats'), { port: nats.port, secure: true, passwords: nats.env });
      lock.track('nats-server', again.child.pid);
      return { ...again, name: 'nats-server' };
    };
    stops.push(['nats-server', supervise({ ...nats, name: 'nats-server' }, restartNats, { active: () => !stopping })]);
    natsUrl = nats.url;
    Object.assign(natsCredentials, nats.env);
    console.log(`nats-server with JetStream at ${natsUrl} (users and permissions: .data/nats/nats.conf)`);
  }

  const common = { ...env, DATABASE_URL: databaseUrl, ...serviceDbUrls, ...natsCredentials, NATS_URL: natsUrl };
  const print = (name) => (line) => process.stdout.write(`[${name}] ${line}\n`);
  // A child that exits is started again on its port (it waits for the database and the bus itself).
  const supervised = (svc) =>
    supervise(svc, () => startService(svc.name, common, { output: print(svc.name), port: svc.port, waitReady: false }), { active: () => !stopping });
  // Billing, payments, NWC and the notifier start side by side; whichever started is stopped on the way out even if another failed.
  const started = await Promise.allSettled([
    startService('billing', common, { output: print('billing'), port: settings.BILLING_OPS_PORT }),
    startService('payments', common, { output: print('payments'), port: settings.PAYMENTS_OPS_PORT }),
    startService('nwc', common, { output: print('nwc'), port: settings.NWC_OPS_PORT }),
    startService('notifier', common, { output: print('notifier'), port: settings.NOTIFIER_OPS_PORT }),
  ]);
  for (const r of started) if (r.status === 'fulfilled') stops.push([r.value.name, supervised(r.value)]);
  // A child that could not start has said why in its own output (printed above).
  for (const r of started) if (r.status === 'rejected') throw new StartError(r.reason.message.split('\n')[0]);
  const port = settings.PORT;
  const gateway = await startService('gateway', common, { output: print('gateway'), port }).catch((err) => {
    throw new StartError(err.message.split('\n')[0]);
  });
  stops.push(['gateway', supervised(gateway)]);

  const wallets = await walletCli(databaseUrl, 'list');
  const api = `http://127.0.0.1:${port}${API_PREFIX}`;
  if (wallets.length === 0) {
    const w = await createWallet(databaseUrl, 'Demo wallet');
    console.log(
      `\n=== Demo wallet created (keys are shown only this once; only their hashes are stored) ===\n` +
        `wallet id:   ${w.id}\nadmin key:   ${w.admin_key}\ninvoice key: ${w.invoice_key}\n` +
        `try: curl -s ${api}/plans -H 'X-Api-Key: ${w.invoice_key}'\n`,
    );
  } else {
    console.log(`\n${wallets.length} wallet(s) exist; new keys: npm run wallet -- rotate-keys --id ${wallets[0].id}`);
  }
  console.log(`API ready at ${api} (OpenAPI: ${api}/openapi.json, API reference: ${api}/docs).`);
  console.log(
    `Checkout page of a plan: http://127.0.0.1:${port}/subscriptions_manager/checkout/<plan id> (GET ${api}/public/plan/<plan id> names it). Ctrl-C stops everything.\n`,
  );
}

main().catch((err) => {
  console.error(err instanceof StartError ? `[start] ${err.message}` : (err?.stack ?? err));
  void shutdown(1);
});

if (!existsSync(join(ROOT, 'services/gateway/dist/main.js'))) {
  console.error('Build first: npm run build');
}
