// Starts the pieces of the system as real processes: used by `npm start`, the end-to-end tests and the
// benchmarks, so all three run the same code the same way.
import { spawn, execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { dbUrlVar } from './db-roles.mjs';
import { natsPasswords, natsServerConfig, passwordVar } from './nats-config.mjs';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const API_PREFIX = '/subscriptions_manager/api/v1';

/**
 * A loopback port free now, none of `avoid` (ports named for other processes that have not bound them
 * yet: the kernel may hand one out again; found in CI: nats-server and a service's ops port on one port).
 */
export async function freePort(avoid = []) {
  for (let i = 0; ; i++) {
    const port = await anyFreePort();
    if (!avoid.includes(port) || i >= 20) return port;
  }
}

function anyFreePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export function findNatsServer() {
  for (const candidate of [process.env.NATS_SERVER_BIN, 'nats-server', '/usr/sbin/nats-server', '/usr/bin/nats-server']) {
    if (!candidate) continue;
    try {
      execFileSync(candidate, ['--version'], { stdio: 'ignore' });
      return candidate;
    } catch {
      /* next */
    }
  }
  return undefined;
}

/**
 * A nats-server with JetStream on a free loopback port, its store in `dir`. `secure`: with the users and
 * subject permissions generated from the contracts (the production shape) and fresh passwords; `env`
 * then holds every `NATS_PASSWORD_<USER>`, for startService to hand each service its own.
 */
export async function startNats(dir, { port, secure = false, devMode = true, tls, passwords, avoid = [] } = {}) {
  const bin = findNatsServer();
  if (!bin) throw new Error('nats-server not found: install it (Debian: apt-get install nats-server) or set NATS_URL');
  port ??= await freePort(avoid);
  mkdirSync(dir, { recursive: true });
  // A restart passes the passwords it was started with, so the services' credentials stay valid.
  const env = secure ? (passwords ?? natsPasswords()) : {};
  let args = ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir];
  if (secure) {
    const conf = join(dir, 'nats.conf');
    writeFileSync(conf, natsServerConfig({ port, storeDir: dir, devMode, tls }), { mode: 0o600 });
    args = ['-c', conf, '-l', join(dir, 'nats.log')];
  }
  const child = spawn(bin, args, { stdio: 'ignore', env: { ...process.env, ...env } });
  const url = `${tls ? 'tls' : 'nats'}://127.0.0.1:${port}`;
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`nats-server exited with ${child.exitCode}`);
      return canConnect(port);
    },
    10_000,
    'nats-server',
  );
  const operator = secure ? { user: 'operator', pass: env[passwordVar('operator')] } : {};
  return { url, port, child, env, operator, logFile: secure ? join(dir, 'nats.log') : undefined, stop: () => stopChild(child) };
}

function canConnect(port) {
  return new Promise((resolve) => {
    const s = createConnection({ port, host: '127.0.0.1' });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });
}

export async function waitFor(check, timeoutMs, what) {
  const until = Date.now() + timeoutMs;
  let lastErr;
  while (Date.now() < until) {
    try {
      if (await check()) return;
    } catch (err) {
      lastErr = err;
      if (/exited/.test(String(err?.message))) throw err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms${lastErr ? `: ${lastErr.message}` : ''}`);
}

export async function waitReady(url, timeoutMs = 20_000, child) {
  await waitFor(
    async () => {
      if (child && child.exitCode !== null) throw new Error(`process exited with ${child.exitCode}`);
      const res = await fetch(url).catch(() => undefined);
      return res?.status === 200;
    },
    timeoutMs,
    url,
  );
}

const SERVICES = {
  billing: { main: 'services/billing/dist/main.js', opsPortVar: 'BILLING_OPS_PORT' },
  gateway: { main: 'services/gateway/dist/main.js', opsPortVar: 'PORT' },
  payments: { main: 'services/payments/dist/main.js', opsPortVar: 'PAYMENTS_OPS_PORT' },
  nwc: { main: 'services/nwc/dist/main.js', opsPortVar: 'NWC_OPS_PORT' },
  notifier: { main: 'services/notifier/dist/main.js', opsPortVar: 'NOTIFIER_OPS_PORT' },
};

/**
 * Starts one service as a child process. `output` is 'inherit', 'ignore', or a function receiving each
 * line. Resolves once its /readyz answers 200 (at once with `waitReady: false`). `nodeArgs` go to node
 * before the script (e.g. `--cpu-prof`, which NODE_OPTIONS refuses).
 */
export async function startService(name, env, { output = 'ignore', port, waitReady: wait = true, nodeArgs = [] } = {}) {
  const spec = SERVICES[name];
  port ??= await freePort();
  const child = spawn(process.execPath, [...nodeArgs, join(ROOT, spec.main)], {
    cwd: ROOT,
    env: { ...ownCredentials(name, { ...process.env, ...env }), [spec.opsPortVar]: String(port) },
    stdio: ['ignore', output === 'inherit' ? 'inherit' : 'pipe', output === 'inherit' ? 'inherit' : 'pipe'],
  });
  const lines = [];
  if (output !== 'inherit') {
    for (const stream of [child.stdout, child.stderr]) {
      let buf = '';
      stream.setEncoding('utf8');
      stream.on('data', (chunk) => {
        buf += chunk;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          lines.push(line);
          if (lines.length > 5000) lines.shift();
          if (typeof output === 'function') output(line);
        }
      });
    }
  }
  const svc = { name, port, child, lines, url: `http://127.0.0.1:${port}`, stop: () => stopChild(child) };
  if (!wait) return svc;
  try {
    await waitReady(`${svc.url}/readyz`, 90_000, child);
  } catch (err) {
    await svc.stop();
    throw new Error(`${name} did not start: ${err.message}\n${lines.slice(-20).join('\n')}`);
  }
  return svc;
}

/**
 * A service is given only its own credentials: its NATS user and password when the environment carries
 * every service's `NATS_PASSWORD_<NAME>` (a secured nats-server), its database role's URL when it carries
 * every `DATABASE_URL_<NAME>`; the other services' secrets are removed.
 */
function ownCredentials(name, env) {
  const own = { ...env };
  const natsPassword = env[passwordVar(name)];
  const dbUrl = env[dbUrlVar(name)];
  for (const k of Object.keys(own)) if (k.startsWith('NATS_PASSWORD_') || k.startsWith('DATABASE_URL_')) delete own[k];
  if (natsPassword) Object.assign(own, { NATS_USER: name, NATS_PASSWORD: natsPassword });
  if (dbUrl) own.DATABASE_URL = dbUrl;
  return own;
}

export function stopChild(child, signal = 'SIGTERM') {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => (clearTimeout(t), resolve()));
    child.kill(signal);
  });
}

/**
 * Runs the wallet tool (`create`, `list`, `rotate-keys`) with --json and returns its parsed output. Async on
 * purpose: the embedded database may live in this very process and must keep serving meanwhile.
 */
export async function walletCli(databaseUrl, ...args) {
  const { stdout } = await promisify(execFile)(process.execPath, [join(ROOT, 'services/gateway/dist/cli/wallet.js'), ...args, '--json'], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: databaseUrl },
    encoding: 'utf8',
  });
  return JSON.parse(stdout);
}

export const createWallet = (databaseUrl, name) => walletCli(databaseUrl, 'create', '--name', name);
