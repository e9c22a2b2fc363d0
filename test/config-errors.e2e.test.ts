import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, ROOT, startNats } from '../scripts/stack.mjs';
import { ADMIN_DATABASE_URL, createDatabase } from './support/stack.js';

/**
 * A configuration an operator got wrong is refused at start by the real processes (the services,
 * `npm start`, the dev and wallet tools): exit code 1 and one line naming the variable, never a stack;
 * a database that refuses the login is waited on instead, said in a line naming DATABASE_URL.
 */
const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
});

const MAINS = {
  gateway: 'services/gateway/dist/main.js',
  billing: 'services/billing/dist/main.js',
  notifier: 'services/notifier/dist/main.js',
  payments: 'services/payments/dist/main.js',
} as const;

interface Run {
  code: number | null;
  lines: string[];
}

/** Runs `args` with `env` over a valid base (nothing listening at its database) until it exits, or kills it after `ms`. */
function run(args: string[], env: Record<string, string>, ms = 30_000): Promise<Run> {
  const child = spawn(args[0]!, args.slice(1), {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
      NATS_URL: 'nats://127.0.0.1:1',
      SECRETS_KEY: randomBytes(32).toString('hex'),
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (c) => (out += c));
  child.stderr!.on('data', (c) => (out += c));
  const timer = setTimeout(() => child.kill('SIGKILL'), ms);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, lines: out.split('\n').filter(Boolean) });
    }),
  );
}

const service = (name: keyof typeof MAINS, env: Record<string, string>, ms?: number) => run([process.execPath, MAINS[name]], env, ms);

/** Exit code 1, a line naming `variable` with `words`, and no stack trace. */
function expectRefused(r: Run, variable: string, words: RegExp): void {
  const all = r.lines.join('\n');
  expect(r.code, all).toBe(1);
  expect(
    r.lines.some((l) => l.includes(`${variable}:`) && words.test(l)),
    all,
  ).toBe(true);
  expect(all).not.toMatch(/^\s+at /m);
}

describe('bad settings of a service', () => {
  it('a malformed SMTP_URL is refused at start, by the same rule as an owner smtp_url', async () => {
    for (const url of ['smtp://user:pw@localhost:notaport', 'smtp://', 'smtp://host/path?x=1', 'http://mail.example', 'smtp://u%ZZ:pw@mail.example']) {
      expectRefused(
        await service('notifier', { SMTP_URL: url, NOTIFIER_OPS_PORT: String(await freePort()) }),
        'SMTP_URL',
        /smtp:\/\/ or smtps:\/\/ with a host/,
      );
    }
  });

  it("a STRIPE_API_URL with a path is refused at start: Stripe's SDK would drop it (found from outside)", async () => {
    for (const url of ['http://127.0.0.1:1/stripe', 'http://127.0.0.1:1/?x=1']) {
      expectRefused(
        await service('payments', {
          CARDPROC_PROVIDER: 'stripe',
          STRIPE_SECRET_KEY: 'sk_test_x',
          STRIPE_WEBHOOK_SECRET: 'whsec_x',
          STRIPE_API_URL: url,
          PAYMENTS_OPS_PORT: String(await freePort()),
        }),
        'STRIPE_API_URL',
        /scheme, host and port only/,
      );
    }
  });

  it('a port out of range names its variable; an empty port is the default, not 0', async () => {
    expectRefused(await service('gateway', { PORT: '70000' }), 'PORT', /1 to 65535/);
    expectRefused(await service('billing', { BILLING_OPS_PORT: '70000' }), 'BILLING_OPS_PORT', /1 to 65535/);
    expectRefused(await service('billing', { BILLING_OPS_PORT: 'abc' }), 'BILLING_OPS_PORT', /1 to 65535/);
    // docker-compose's PORT=${PORT} with nothing set: the default 8080 (taken or not here), never a random port.
    const r = await service('gateway', { PORT: '', HOST: '127.0.0.1', LOG_LEVEL: 'info' }, 3000);
    expect(r.lines.join('\n')).toMatch(/"port":8080,"msg":"gateway listening"|PORT: port 8080 is already in use/);
  });

  it('an empty value is the default for every setting, not a bad value (found from outside: LOG_LEVEL=, LIGHTNING_PROVIDER=, SMTP_URL= stopped the service)', async () => {
    const empty = (names: string[]) => Object.fromEntries(names.map((n) => [n, '']));
    const cases = [
      ['billing', 'BILLING_OPS_PORT', ['PUBLIC_BASE_URL']],
      ['payments', 'PAYMENTS_OPS_PORT', ['LIGHTNING_PROVIDER', 'ONCHAIN_PROVIDER', 'FIAT_CURRENCY', 'FIAT_RATE_FIXED', 'PUBLIC_BASE_URL']],
      ['notifier', 'NOTIFIER_OPS_PORT', ['SMTP_URL', 'MAIL_FROM', 'MESSENGER_API_URL']],
    ] as const;
    for (const [name, ops, names] of cases) {
      const r = await service(name, { ...empty(['LOG_LEVEL', 'SECRETS_KEY_PREVIOUS', ...names]), [ops]: String(await freePort()) }, 4_000);
      const all = r.lines.join('\n');
      // Still running when stopped, waiting for its database: not refused at start.
      expect(all, name).not.toMatch(/Invalid configuration/);
      expect(r.code, `${name}: ${all}`).toBeNull();
    }
  });

  it('a HOST that is no address of this host, or no name at all: one line naming HOST (found from outside: a stack)', async () => {
    // A machine without a name service says it could not be resolved now: HOST either way.
    expectRefused(await service('gateway', { HOST: 'not_a_host!', PORT: String(await freePort()) }), 'HOST', /not an address or a name|could not be resolved/);
    const data = mkdtempSync(join(tmpdir(), 'sb-cfg-start-'));
    cleanups.push(() => rmSync(data, { recursive: true, force: true }));
    const start = await run([process.execPath, 'scripts/start.mjs'], {
      HOST: 'not_a_host!',
      SB_DATA_DIR: data,
      DATABASE_URL: '',
      NATS_URL: '',
      PORT: String(await freePort()),
    });
    expectRefused(start, 'HOST', /could not be resolved/);
  });

  it('a MAIL_FROM that is no mailbox, or a PUBLIC_BASE_URL not http(s), is refused at start (found from outside: both taken)', async () => {
    expectRefused(await service('notifier', { MAIL_FROM: 'garbage', NOTIFIER_OPS_PORT: String(await freePort()) }), 'MAIL_FROM', /one address/);
    expectRefused(await service('billing', { PUBLIC_BASE_URL: 'ftp://x', BILLING_OPS_PORT: String(await freePort()) }), 'PUBLIC_BASE_URL', /http\(s\)/);
  });

  it('DATABASE_URL must be a postgres:// URL with a user', async () => {
    for (const url of ['mysql://x@127.0.0.1/db', 'postgres://', 'postgres://127.0.0.1/db', 'not a url']) {
      expectRefused(await service('billing', { DATABASE_URL: url, BILLING_OPS_PORT: String(await freePort()) }), 'DATABASE_URL', /postgres:\/\//);
    }
  });

  it('a malformed NATS_URL is refused at start', async () => {
    for (const url of ['nats://127.0.0.1:notaport', 'nats://127.0.0.1:4222,', 'http://127.0.0.1:4222']) {
      expectRefused(await service('billing', { NATS_URL: url, BILLING_OPS_PORT: String(await freePort()) }), 'NATS_URL', /nats:\/\//);
    }
  });

  it('a port already in use: one line naming the variable and the port, exit 1', async () => {
    const taken: Server = createServer();
    await new Promise<void>((r) => taken.listen(0, '0.0.0.0', r));
    cleanups.push(() => new Promise((r) => taken.close(r)));
    const port = (taken.address() as { port: number }).port;
    expectRefused(await service('billing', { BILLING_OPS_PORT: String(port) }), 'BILLING_OPS_PORT', new RegExp(`port ${port} is already in use`));
    expectRefused(await service('gateway', { PORT: String(port) }), 'PORT', new RegExp(`port ${port} is already in use`));
  });
});

describe('NATS settings', () => {
  it('an unreadable NATS_TLS_CA_FILE, or TLS asked of a server without it: one line naming it, exit 1, the gateway too (found from outside: a stack; a gateway left answering 503)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-cfg-nats-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const nats = await startNats(join(dir, 'store'), {});
    cleanups.push(() => nats.stop());
    const database = await createDatabase('sb_cfgnats');
    cleanups.push(() => database.drop());
    const ca = join(dir, 'ca.pem');
    writeFileSync(ca, '-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n');
    const base = { NATS_URL: nats.url, DATABASE_URL: database.url };
    for (const [name, ops] of [
      ['gateway', 'PORT'],
      ['billing', 'BILLING_OPS_PORT'],
    ] as const) {
      // The client learns the server has no TLS before it reads the file: either is the setting to fix.
      const missing = await service(name, { ...base, NATS_TLS_CA_FILE: join(dir, 'none.pem'), [ops]: String(await freePort()) }, 20_000);
      expectRefused(missing, 'NATS_TLS_CA_FILE', /cannot be read|tls/i);
      const plain = await service(name, { ...base, NATS_TLS_CA_FILE: ca, [ops]: String(await freePort()) }, 20_000);
      expectRefused(plain, 'NATS_TLS_CA_FILE', /tls/i);
    }
  });
});

describe('a service still waiting for its database', () => {
  /** Starts `name` against a database port nothing listens on, logging at info; resolves once it says it waits. */
  async function waiting(name: keyof typeof MAINS, env: Record<string, string> = {}) {
    const port = await freePort();
    const child = spawn(process.execPath, [MAINS[name]], {
      cwd: ROOT,
      env: {
        ...process.env,
        DATABASE_URL: `postgres://nobody@127.0.0.1:${await freePort()}/none`,
        NATS_URL: 'nats://127.0.0.1:1',
        SECRETS_KEY: randomBytes(32).toString('hex'),
        LOG_LEVEL: 'info',
        PORT: String(port),
        BILLING_OPS_PORT: String(port),
        NOTIFIER_OPS_PORT: String(port),
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanups.push(() => child.kill('SIGKILL'));
    let out = '';
    child.stdout!.on('data', (c) => (out += c));
    child.stderr!.on('data', (c) => (out += c));
    const exited = new Promise<{ code: number | null; signal: string | null }>((r) => child.once('exit', (code, signal) => r({ code, signal })));
    for (let i = 0; i < 150 && !/database not reachable/.test(out) && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    expect(out).toMatch(/database not reachable/);
    return { child, exited, out: () => out };
  }

  it.each(['billing', 'gateway'] as const)('%s stops in order on SIGTERM, not killed by it (review)', async (name) => {
    const s = await waiting(name);
    s.child.kill('SIGTERM');
    const end = await s.exited;
    // Before: killed by the signal itself (no exit code), with no word of it in the log.
    expect(end, s.out()).toEqual({ code: 0, signal: null });
    expect(s.out()).toMatch(new RegExp(`"signal":"SIGTERM".*"msg":"${name} stopping"`));
  });

  it.each(['billing', 'gateway'] as const)('%s stops by itself once the npm start that ran it is gone (review)', async (name) => {
    // SB_PARENT_PID names a process that is not its parent: as when npm start was killed outright.
    const s = await waiting(name, { SB_PARENT_PID: '1' });
    const end = await Promise.race([s.exited, new Promise((r) => setTimeout(() => r('still running'), 15_000))]);
    expect(end, s.out()).toEqual({ code: 0, signal: null });
    expect(s.out()).toMatch(/"signal":"parent exited"/);
  });
});

describe('a database that refuses the login', () => {
  it('is said in a line naming DATABASE_URL and waited on (/readyz 503): the service comes up once the role exists', async () => {
    const database = await createDatabase('sb_cfglogin');
    cleanups.push(() => database.drop());
    const role = `sb_cfg_${process.pid}_${Date.now().toString(36)}`;
    const admin = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
    await admin.connect();
    cleanups.push(async () => {
      await database.drop();
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
    });
    const dir = mkdtempSync(join(tmpdir(), 'sb-cfg-nats-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const nats = await startNats(dir, {});
    cleanups.push(nats.stop);
    const url = new URL(database.url);
    url.username = role;
    url.password = 'rotated-late';
    const opsPort = await freePort();
    const child = spawn(process.execPath, [MAINS.billing], {
      cwd: ROOT,
      env: {
        ...process.env,
        DATABASE_URL: url.toString(),
        NATS_URL: nats.url,
        SECRETS_KEY: randomBytes(32).toString('hex'),
        BILLING_OPS_PORT: String(opsPort),
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanups.push(() => child.kill('SIGKILL'));
    let out = '';
    child.stdout!.on('data', (c) => (out += c));
    child.stderr!.on('data', (c) => (out += c));
    const readyz = () =>
      fetch(`http://127.0.0.1:${opsPort}/readyz`).then(
        (r) => r.status,
        () => 0,
      );
    for (let i = 0; i < 100 && !out.includes('DATABASE_URL refused'); i++) await new Promise((r) => setTimeout(r, 100));
    expect(out).toMatch(/DATABASE_URL refused: .*role/);
    expect(out).not.toContain('rotated-late');
    expect(child.exitCode, out).toBeNull();
    expect(await readyz()).toBe(503);
    // The role (and its password) arrives after the pod started, as a Kubernetes Secret rotated late.
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'rotated-late'`);
    await admin.query(`ALTER DATABASE ${database.name} OWNER TO ${role}`);
    let status = 0;
    for (let i = 0; i < 200 && status !== 200 && child.exitCode === null; i++) {
      status = await readyz();
      if (status !== 200) await new Promise((r) => setTimeout(r, 250));
    }
    expect(status, out).toBe(200);
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r(undefined) : child.once('exit', r)));
  }, 90_000);
});

describe('npm start and the dev tools', () => {
  it('PORT=abc: npm start names PORT (not PUBLIC_BASE_URL), in one line, exit 1', async () => {
    const data = mkdtempSync(join(tmpdir(), 'sb-cfg-start-'));
    cleanups.push(() => rmSync(data, { recursive: true, force: true }));
    const r = await run([process.execPath, 'scripts/start.mjs'], { PORT: 'abc', SB_DATA_DIR: data, DATABASE_URL: '', NATS_URL: '' });
    expectRefused(r, 'PORT', /1 to 65535/);
    expect(r.lines.join('\n')).not.toContain('PUBLIC_BASE_URL');
  });

  it('npm start with a port another process holds, or two ports the same: one line naming it, exit 1, nothing started (found from outside: "API ready" at the other server)', async () => {
    const taken: Server = createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => taken.close(r)));
    const port = (taken.address() as { port: number }).port;
    const data = mkdtempSync(join(tmpdir(), 'sb-cfg-start-'));
    cleanups.push(() => rmSync(data, { recursive: true, force: true }));
    const base = { SB_DATA_DIR: data, DATABASE_URL: '', NATS_URL: '', BILLING_OPS_PORT: String(await freePort()) };
    const held = await run([process.execPath, 'scripts/start.mjs'], { ...base, PORT: String(port) });
    expectRefused(held, 'PORT', new RegExp(`port ${port} is already in use by another process`));
    const twice = await run([process.execPath, 'scripts/start.mjs'], { ...base, PORT: base.BILLING_OPS_PORT });
    expectRefused(twice, 'BILLING_OPS_PORT', /is PORT's too/);
    for (const r of [held, twice]) expect(r.lines.join('\n')).not.toMatch(/embedded PostgreSQL|nats-server with JetStream|API ready/);
  });

  it('npm start against a database that refuses the admin login: one line naming DATABASE_URL, exit 1', async () => {
    const data = mkdtempSync(join(tmpdir(), 'sb-cfg-start-'));
    cleanups.push(() => rmSync(data, { recursive: true, force: true }));
    const url = new URL(ADMIN_DATABASE_URL);
    url.username = 'sb_no_such_role';
    const r = await run([process.execPath, 'scripts/start.mjs'], { DATABASE_URL: url.toString(), SB_DATA_DIR: data, NATS_URL: 'nats://127.0.0.1:1' });
    expectRefused(r, 'DATABASE_URL', /sb_no_such_role/);
  });

  it('a second npm start is refused before any build', async () => {
    const data = mkdtempSync(join(tmpdir(), 'sb-cfg-lock-'));
    cleanups.push(() => rmSync(data, { recursive: true, force: true }));
    // This test's process stands for the running start.
    writeFileSync(join(data, 'start.lock'), JSON.stringify({ pid: process.pid, children: {} }));
    const r = await run(['npm', 'start'], { SB_DATA_DIR: data }, 170_000);
    const all = r.lines.join('\n');
    expect(r.code, all).toBe(1);
    expect(all).toContain(`Another npm start (pid ${process.pid}) is running`);
    // Nothing of the build (vite's report of web/dist) ran.
    expect(all).not.toMatch(/vite v\d|modules transformed|built in/);
  }, 180_000);

  it('npm run wallet shows no web build before its answer', async () => {
    const database = await createDatabase('sb_cfgwallet');
    cleanups.push(() => database.drop());
    const r = await run(['npm', 'run', 'wallet', '--', 'list'], { DATABASE_URL: database.url }, 170_000);
    const all = r.lines.join('\n');
    expect(r.code, all).toBe(0);
    expect(all).not.toMatch(/vite v\d|modules transformed|built in/);
  }, 180_000);

  it('npm run dev without a running stack says where it looked and to start it; a bad count is refused locally', async () => {
    const port = await freePort();
    const pay = await run([process.execPath, 'scripts/dev.mjs', 'pay', 'pay_x'], { PORT: String(port) });
    expect(pay.code).toBe(1);
    expect(pay.lines.join('\n')).toMatch(new RegExp(`no answer from http://127\\.0\\.0\\.1:${port}/.*npm start`));
    const seen: string[] = [];
    const api = createHttpServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.writeHead(422, { 'content-type': 'application/json' }).end('{"detail":"unexpected"}');
    });
    await new Promise<void>((r) => api.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => api.close(r)));
    const apiUrl = `http://127.0.0.1:${(api.address() as { port: number }).port}`;
    const clock = await run([process.execPath, 'scripts/dev.mjs', 'clock', '--advance-days', 'abc'], { API_URL: apiUrl, ADMIN_KEY: 'x' });
    expect(clock.code).toBe(1);
    expect(clock.lines.join('\n')).toContain('--advance-days must be a number');
    expect(seen).toEqual([]);
  });
});
