import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, until } from './support/http.js';
import { spawnStart, type StartedStack, untilReady } from './support/start.js';
import { ROOT } from '../scripts/stack.mjs';

/**
 * The README's first command on a fresh machine: `npm start` without DATABASE_URL runs on the embedded
 * PGlite, which serves every service's connections on its one session. The walkthrough runs there several
 * times over, so the statements each process repeats (and would prepare under a name of its own) meet.
 * A client of that session killed inside its transaction must not stop the others, and Ctrl-C must end
 * it all and clean up even with a client still connected.
 */
let stack: StartedStack;
let data: string;
let api: string;
let admin: string;

beforeAll(async () => {
  // Named `.data` in a directory of its own: the wallet tool run there looks for `.data/runtime.json`.
  data = join(mkdtempSync(join(tmpdir(), 'sb-embedded-')), '.data');
  stack = await spawnStart({ DATABASE_URL: '', NATS_URL: '', DB_PREPARED_STATEMENTS: '', SB_DATA_DIR: data });
  await untilReady(stack);
  const out = stack.lines.join('\n');
  admin = /admin key:\s+([0-9a-f]{64})/.exec(out)?.[1] ?? '';
  expect(admin, out).toMatch(/^[0-9a-f]{64}$/);
  api = `http://127.0.0.1:${stack.ports.PORT}/subscriptions_manager/api/v1`;
}, 180_000);

afterAll(async () => {
  const child = stack?.child;
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await Promise.race([stack.exited, new Promise((r) => setTimeout(r, 20_000))]);
    if (child.exitCode === null) child.kill('SIGKILL');
  }
  if (data) rmSync(dirname(data), { recursive: true, force: true });
});

describe('npm start on the embedded database', () => {
  it('runs the walkthrough over and over: plans, checkouts, payments, a renewal', async () => {
    const owner = client(api, admin);
    const pub = client(api);
    const subs: { sub: string; pay: string }[] = [];
    // Five rounds: every statement on the way runs more often than a process takes to name it.
    for (let i = 0; i < 5; i++) {
      const plan = await owner.post('/plans', { name: `Gold ${i}`, amount_sats: 21_000 + i, interval: 'monthly' });
      expect(plan.status, JSON.stringify(plan.body)).toBe(201);
      const shown = await pub.get(`/public/plan/${plan.body.id}`);
      expect(shown.status).toBe(200);
      expect(shown.body.amount_sats).toBe(21_000 + i);
      const checkout = await pub.post('/public/subscribe', {
        plan_id: plan.body.id,
        payment_method: 'lightning',
        email: `alice${i}@example.com`,
      });
      expect(checkout.status, JSON.stringify(checkout.body)).toBe(201);
      const paid = await pub.post(`/dev/payments/${checkout.body.payment_id}/pay`);
      expect(paid.status, JSON.stringify(paid.body)).toBe(200);
      subs.push({ sub: checkout.body.subscription_id, pay: checkout.body.payment_id });
    }
    for (const { sub } of subs) {
      const s = await until(
        () => owner.get(`/subscriptions/${sub}`),
        (r) => r.body?.status === 'active',
      );
      expect(s.body.status, JSON.stringify(s.body)).toBe('active');
    }
    // 29 days on: each subscription has its renewal payment.
    const moved = await owner.post('/dev/clock', { advance_seconds: 2_505_600 });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    for (const { sub } of subs) {
      const pending = await until(
        () => owner.get(`/payments?subscription_id=${sub}&status=pending`),
        (r) => r.body?.items?.length === 1,
        30_000,
      );
      expect(pending.body.items, JSON.stringify(pending.body)).toHaveLength(1);
    }
    expect(stack.lines.filter((l) => /already exists|does not exist/.test(l))).toEqual([]);
  });

  it('a process killed with SIGKILL inside its transaction leaves the database to the others', async () => {
    const { DATABASE_URL } = JSON.parse(readFileSync(join(data, 'runtime.json'), 'utf8'));
    // A process of its own (as a service is) that opens a transaction, writes, says so and waits.
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const c = new (require('pg').Client)(process.argv[1]);
         c.connect().then(() => c.query('BEGIN')).then(() => c.query('CREATE TABLE held (n int)')).then(() => console.log('holding'));
         setInterval(() => {}, 1000);`,
        DATABASE_URL,
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise((resolve) => holder.stdout!.once('data', resolve));
    const owner = client(api, admin);
    // Sent while the transaction holds the session; answered once its process is gone.
    const during = owner.post('/plans', { name: 'During', amount_sats: 1000, interval: 'weekly' });
    await new Promise((r) => setTimeout(r, 100));
    holder.kill('SIGKILL');
    const started = Date.now();
    expect((await during).status).toBe(201);
    const after = await owner.post('/plans', { name: 'After', amount_sats: 1000, interval: 'weekly' });
    expect(after.status, JSON.stringify(after.body)).toBe(201);
    expect(Date.now() - started).toBeLessThan(5000);
    // Its transaction was rolled back.
    const c = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 5000, query_timeout: 5000 });
    await c.connect();
    expect((await c.query("SELECT to_regclass('held') AS t")).rows[0].t).toBeNull();
    await c.end();
  });

  it('the wallet tool finds the stack of SB_DATA_DIR from any directory (found from outside: only ./.data was looked at)', async () => {
    const listed = await promisify(execFile)(process.execPath, [join(ROOT, 'services/gateway/dist/cli/wallet.js'), 'list', '--json'], {
      cwd: tmpdir(),
      env: { ...process.env, DATABASE_URL: '', SB_DATA_DIR: data },
    });
    expect(JSON.parse(listed.stdout).map((w: { name: string }) => w.name)).toContain('Demo wallet');
  });

  it('Ctrl-C ends it with a client still inside a transaction, and leaves no runtime.json or lock', async () => {
    const { DATABASE_URL } = JSON.parse(readFileSync(join(data, 'runtime.json'), 'utf8'));
    const c = new pg.Client(DATABASE_URL);
    c.on('error', () => undefined);
    await c.connect();
    await c.query('BEGIN');
    stack.child.kill('SIGINT');
    const code = await Promise.race([stack.exited, new Promise((r) => setTimeout(() => r('still running'), 60_000))]);
    expect(code).toBe(0);
    expect(existsSync(join(data, 'runtime.json'))).toBe(false);
    expect(existsSync(join(data, 'start.lock'))).toBe(false);
    // The wallet tool says nothing runs, rather than failing to connect to the address that was.
    const wallet = await promisify(execFile)(process.execPath, [join(ROOT, 'services/gateway/dist/cli/wallet.js'), 'list'], {
      cwd: dirname(data),
      env: { ...process.env, DATABASE_URL: '' },
    }).catch((err: { stderr: string }) => err);
    expect(wallet.stderr).toContain("no running 'npm start' was found");
    // Nor after an `npm start` killed outright, whose runtime.json is left behind (found from outside: ECONNREFUSED).
    writeFileSync(join(data, 'runtime.json'), JSON.stringify({ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/postgres', pid: 2 ** 22 + 1 })); // above any pid Linux gives
    const stale = await promisify(execFile)(process.execPath, [join(ROOT, 'services/gateway/dist/cli/wallet.js'), 'list'], {
      cwd: dirname(data),
      env: { ...process.env, DATABASE_URL: '' },
    }).catch((err: { stderr: string }) => err);
    expect(stale.stderr).toContain("no running 'npm start' was found");
  }, 90_000);
});
