import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { findNatsServer, freePort, startNats, startService, stopChild, waitFor } from '../../../scripts/stack.mjs';
import { createDatabase } from '../../../test/support/stack.js';
import { connect } from '@nats-io/transport-node';
import { BusClient, createBusServer, defineHandler, registerHandlers } from '../src/bus.js';
import { createDb } from '../src/db.js';
import { DurableEventConsumer } from '../src/event-consumer.js';
import type { Logger } from '../src/logger.js';

/**
 * Bus listeners against a real nats-server whose users and permissions are changed and reloaded
 * (SIGHUP), as when a deployed auth.conf is older than the code, or a password was rotated in the wrong
 * order. Found from outside: the gateway never answered gateway.internal.wallet_name again until it was
 * restarted, and a client whose reply inbox the server had refused once timed out on every request.
 */
const dirs: string[] = [];
const stops: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface User {
  user: string;
  password: string;
  publish: string[];
  subscribe: string[];
}

/** A nats-server run from a config file this test rewrites and reloads. */
async function natsWithUsers(users: User[]) {
  const dir = mkdtempSync(join(tmpdir(), 'sb-bus-resilience-'));
  dirs.push(dir);
  const port = await freePort();
  const conf = join(dir, 'nats.conf');
  const write = (us: User[]) => {
    const list = (xs: string[]) => `[${xs.map((x) => JSON.stringify(x)).join(', ')}]`;
    const entries = us.map(
      (u) =>
        `{ user: ${u.user}, password: ${JSON.stringify(u.password)}, permissions: { publish: { allow: ${list(u.publish)} }, subscribe: { allow: ${list(u.subscribe)} }, allow_responses: true } }`,
    );
    writeFileSync(
      conf,
      `host: "127.0.0.1"\nport: ${port}\njetstream: { store_dir: ${JSON.stringify(dir)} }\nauthorization { users: [\n${entries.join('\n')}\n] }\n`,
    );
  };
  write(users);
  const child: ChildProcess = spawn(findNatsServer()!, ['-c', conf], { stdio: 'ignore' });
  stops.push(() => stopChild(child));
  await waitFor(
    () =>
      new Promise<boolean>((resolve) => {
        import('node:net').then(({ createConnection }) => {
          const s = createConnection({ port, host: '127.0.0.1' });
          s.once('connect', () => (s.destroy(), resolve(true)));
          s.once('error', () => resolve(false));
        });
      }),
    10_000,
    'nats-server',
  );
  return {
    url: `nats://127.0.0.1:${port}`,
    /** New users and permissions, applied by the running server (a config reload). */
    reload(us: User[]) {
      write(us);
      child.kill('SIGHUP');
    },
  };
}

function recorder() {
  const lines: string[] = [];
  const line = (level: string) => (obj: object, msg?: string) => void lines.push(`${level} ${msg ?? ''} ${JSON.stringify(obj)}`);
  const log = { warn: line('warn'), info: line('info'), error: line('error'), debug: () => undefined, fatal: line('fatal') } as unknown as Logger;
  return { lines, log };
}

const echo = defineHandler({ subject: 'res.echo', request: z.object({ say: z.string() }), handle: async ({ say }) => ({ said: say }) });

const asker: User = { user: 'asker', password: 'askerpw', publish: ['res.>'], subscribe: ['_INBOX_asker.>'] };
const answerer = (subscribe: string[], password = 'answererpw'): User => ({
  user: 'answerer',
  password,
  publish: [],
  subscribe: ['_INBOX_answerer.>', ...subscribe],
});

async function eventually<T>(what: () => Promise<T | undefined>, ms: number): Promise<T | undefined> {
  const until = Date.now() + ms;
  for (;;) {
    const got = await what().catch(() => undefined);
    if (got !== undefined || Date.now() > until) return got;
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe("a service's bus answers", () => {
  it('keep trying a subject the server refuses (an auth.conf older than the code), logged once, and answer once it is allowed', async () => {
    const nats = await natsWithUsers([asker, answerer([])]);
    const { lines, log } = recorder();
    const server = createBusServer({ NATS_URL: nats.url, NATS_USER: 'answerer', NATS_PASSWORD: 'answererpw' }, 'answerer');
    registerHandlers(server, [echo], log);
    stops.push(() => server.close());
    let listened = false;
    void server.listen().then(() => (listened = true));
    const client = new BusClient({ NATS_URL: nats.url, NATS_USER: 'asker', NATS_PASSWORD: 'askerpw' }, 2_000, 'asker');
    stops.push(() => client.close());
    await client.connect();

    await new Promise((r) => setTimeout(r, 3500));
    expect(listened).toBe(false);
    expect(server.listening).toBe(false);
    await expect(client.request('res.echo', { say: 'hi' })).rejects.toThrow(/no responders/);
    // Three or four tries by now (1 s doubling), one line.
    const refusals = lines.filter((l) => l.includes('bus answers of answerer not listening'));
    expect(refusals, lines.join('\n')).toHaveLength(1);
    expect(refusals[0]).toMatch(/Permissions Violation/i);

    nats.reload([asker, answerer(['res.>'])]);
    const answered = await eventually(() => client.request('res.echo', { say: 'hi' }), 15_000);
    expect(answered).toEqual({ ok: true, data: { said: 'hi' } });
    expect(server.listening).toBe(true);
    expect(lines.some((l) => l.includes('bus answers of answerer listening again'))).toBe(true);

    // Taken away while it runs (the server drops the subscription on reload), then given back.
    nats.reload([asker, answerer([])]);
    expect(await eventually(async () => (server.listening ? undefined : true), 5_000)).toBe(true);
    nats.reload([asker, answerer(['res.>'])]);
    expect(await eventually(() => client.request('res.echo', { say: 'again' }), 15_000)).toEqual({ ok: true, data: { said: 'again' } });
    expect(server.listening).toBe(true);
  }, 60_000);

  it('keep trying a login the server refuses (a password rotated before the server had it) and answer once it is let in', async () => {
    const nats = await natsWithUsers([asker, answerer(['res.>'], 'oldpw')]);
    const { lines, log } = recorder();
    const server = createBusServer({ NATS_URL: nats.url, NATS_USER: 'answerer', NATS_PASSWORD: 'newpw' }, 'answerer');
    registerHandlers(server, [echo], log);
    stops.push(() => server.close());
    let outcome: unknown;
    void server.listen().then(
      () => (outcome = 'listening'),
      (err: unknown) => (outcome = err),
    );
    await new Promise((r) => setTimeout(r, 2500));
    expect(outcome).toBeUndefined();
    const refusals = lines.filter((l) => l.includes('NATS not reachable yet'));
    expect(refusals, lines.join('\n')).toHaveLength(1);
    expect(refusals[0]).toMatch(/Authorization/i);

    // Connected before the reload: a login while nats-server swaps its users may be refused (it was, in CI).
    const client = new BusClient({ NATS_URL: nats.url, NATS_USER: 'asker', NATS_PASSWORD: 'askerpw' }, 2_000, 'asker');
    stops.push(() => client.close());
    await client.connect();
    nats.reload([asker, answerer(['res.>'], 'newpw')]);
    expect(await eventually(() => client.request('res.echo', { say: 'in' }), 15_000)).toEqual({ ok: true, data: { said: 'in' } });
    expect(outcome).toBe('listening');
  }, 60_000);
});

describe('an answerer whose auth.conf is older than its code (no working signals allowed)', () => {
  it('answers a long request after longer than the default wait, says once that its signals are refused', async () => {
    // The previous configuration: replies on the reply subject only, no `<reply>.w` signals, no probe.
    const nats = await natsWithUsers([asker, answerer(['res.>'])]);
    const { lines, log } = recorder();
    const slow = defineHandler({
      subject: 'res.slow',
      request: z.object({ ms: z.number() }),
      handle: ({ ms }) => new Promise((r) => setTimeout(() => r({ worked: ms }), ms)),
    });
    const server = createBusServer({ NATS_URL: nats.url, NATS_USER: 'answerer', NATS_PASSWORD: 'answererpw' }, 'answerer');
    registerHandlers(server, [slow], log);
    stops.push(() => server.close());
    await server.listen();
    const client = new BusClient({ NATS_URL: nats.url, NATS_USER: 'asker', NATS_PASSWORD: 'askerpw' }, 2_000, 'asker');
    stops.push(() => client.close());
    await client.connect();

    expect(await client.request('res.slow', { ms: 1 })).toEqual({ ok: true, data: { worked: 1 } });
    // Longer than the idle time: without signals the caller keeps its whole wait.
    expect(await client.request('res.slow', { ms: 5000 }, 20_000)).toEqual({ ok: true, data: { worked: 5000 } });
    const refused = lines.filter((l) => l.includes('working signals refused'));
    expect(refused, lines.join('\n')).toHaveLength(1);
    expect(
      lines.filter((l) => l.includes('NATS error')),
      lines.join('\n'),
    ).toEqual([]);
  }, 60_000);
});

describe("a bus client's reply inbox", () => {
  it('is subscribed again after the server refused it on a permissions reload: requests work again without a restart', async () => {
    const nats = await natsWithUsers([asker, answerer(['res.>'])]);
    const { log } = recorder();
    const server = createBusServer({ NATS_URL: nats.url, NATS_USER: 'answerer', NATS_PASSWORD: 'answererpw' }, 'answerer');
    registerHandlers(server, [echo], log);
    stops.push(() => server.close());
    await server.listen();
    const client = new BusClient({ NATS_URL: nats.url, NATS_USER: 'asker', NATS_PASSWORD: 'askerpw' }, 1_000, 'asker');
    stops.push(() => client.close());
    expect(await client.request('res.echo', { say: 'one' })).toEqual({ ok: true, data: { said: 'one' } });

    // The asker may no longer read its inbox: the server drops the subscription.
    nats.reload([{ ...asker, subscribe: ['nothing.here'] }, answerer(['res.>'])]);
    expect(
      await eventually(
        () =>
          client.request('res.echo', { say: 'two' }).then(
            () => undefined,
            () => true,
          ),
        5_000,
      ),
    ).toBe(true);

    nats.reload([asker, answerer(['res.>'])]);
    expect(await eventually(() => client.request('res.echo', { say: 'three' }), 15_000)).toEqual({ ok: true, data: { said: 'three' } });
  }, 60_000);
});

describe('the gateway started with an auth.conf older than its code', () => {
  it('is not ready while it cannot listen to gateway.internal.wallet_name, says so once, and answers once the config is reloaded', async () => {
    const database = await createDatabase('sb_busperm');
    stops.push(() => database.drop());
    const dir = mkdtempSync(join(tmpdir(), 'sb-nats-oldconf-'));
    dirs.push(dir);
    const nats = await startNats(dir, { secure: true });
    stops.push(nats.stop);
    const conf = join(dir, 'nats.conf');
    const current = readFileSync(conf, 'utf8');
    const old = current.replace('"_INBOX_gateway.>", "gateway.internal.wallet_name"', '"_INBOX_gateway.>"');
    expect(old).not.toBe(current);
    writeFileSync(conf, old);
    nats.child.kill('SIGHUP');
    await new Promise((r) => setTimeout(r, 300));

    const gateway = await startService(
      'gateway',
      { DATABASE_URL: database.url, NATS_URL: nats.url, ...nats.env, SECRETS_KEY: randomBytes(32).toString('hex'), LOG_LEVEL: 'info' },
      { waitReady: false },
    );
    stops.push(gateway.stop);
    const readyz = () =>
      fetch(`${gateway.url}/readyz`).then(
        async (r) => ({ status: r.status, body: (await r.json()) as { checks: Record<string, boolean> } }),
        () => undefined,
      );
    const refusedOnce = () => gateway.lines.filter((l: string) => l.includes('bus answers of gateway not listening'));
    expect(await eventually(async () => (refusedOnce().length ? true : undefined), 30_000), gateway.lines.join('\n')).toBe(true);
    await new Promise((r) => setTimeout(r, 3500));
    expect(await readyz()).toEqual({ status: 503, body: expect.objectContaining({ checks: { database: true, bus: false } }) });
    expect(refusedOnce(), gateway.lines.join('\n')).toHaveLength(1);

    writeFileSync(conf, current);
    nats.child.kill('SIGHUP');
    const ready = await eventually(async () => ((await readyz())?.status === 200 ? true : undefined), 40_000);
    expect(ready, gateway.lines.slice(-20).join('\n')).toBe(true);
    const operator = new BusClient({ NATS_URL: nats.url, NATS_USER: 'operator', NATS_PASSWORD: nats.operator.pass }, 5_000, 'operator');
    stops.push(() => operator.close());
    const reply = await operator.request('gateway.internal.wallet_name', { wallet_id: 'wal_nosuchwallet' });
    // Answered (a wallet it does not know), not "no responders".
    expect(reply).toMatchObject({ ok: false, error: { kind: 'not_found' } });
  }, 120_000);
});

describe('an event consumer the server does not let create its JetStream consumer yet', () => {
  it('waits for it (one line in the log) instead of failing the start, and starts once it is allowed', async () => {
    const reader = (publish: string[]): User => ({ user: 'reader', password: 'readerpw', publish, subscribe: ['_INBOX.>'] });
    const nats = await natsWithUsers([reader(['$JS.API.INFO', '$JS.API.STREAM.>'])]);
    const database = await createDatabase('sb_busperm_ec');
    stops.push(() => database.drop());
    const db = createDb(database.url, { max: 2 });
    stops.push(() => db.close());
    await db.query('CREATE SCHEMA IF NOT EXISTS ec');
    const nc = await connect({ servers: nats.url, user: 'reader', pass: 'readerpw', ignoreAuthErrorAbort: true });
    stops.push(() => nc.close());
    const { lines, log } = recorder();
    const consumer = new DurableEventConsumer(nc, { durable: 'ec-perm', filterSubject: 'events.>', handle: async () => 'ok', log, db, schema: 'ec' });
    stops.push(() => consumer.stop());
    let outcome: unknown;
    void consumer.start().then(
      () => (outcome = 'started'),
      (err: unknown) => (outcome = err),
    );
    await new Promise((r) => setTimeout(r, 3500));
    expect(outcome).toBeUndefined();
    const refusals = lines.filter((l) => l.includes('event consumer ec-perm not set up'));
    expect(refusals, lines.join('\n')).toHaveLength(1);

    nats.reload([reader(['$JS.API.>'])]);
    expect(await eventually(async () => outcome, 20_000)).toBe('started');
  }, 60_000);
});
