import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { WORKING_SUFFIX } from '@sb/contracts';
import { startNats, stopChild } from '../../../scripts/stack.mjs';
import { BusClient, createBusServer, defineHandler, registerHandlers } from '../src/bus.js';
import { BusUnavailableError } from '../src/errors.js';
import type { Logger } from '../src/logger.js';

/**
 * A long request (a route with a wait of its own, as POST /subscriptions/{id}/resume's 45 s) whose
 * answerer dies mid-request. Found from outside: with billing killed (SIGKILL) while resumes were in
 * flight, the gateway answered 503 only after the route's whole 45 s. With working signals the caller
 * notices within its idle time, and a long handler that is alive still gets its whole wait.
 */
const dir = mkdtempSync(join(tmpdir(), 'sb-bus-alive-'));
const stops: Array<() => Promise<unknown>> = [];
let nats: Awaited<ReturnType<typeof startNats>>;
beforeAll(async () => {
  nats = await startNats(join(dir, 'nats'));
});
afterAll(async () => {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The caller's default wait (BUS_TIMEOUT_MS) and the long route's own. */
const DEFAULT_MS = 2000;
const ROUTE_MS = 30_000;

const quiet = { warn: () => undefined, info: () => undefined, error: () => undefined, debug: () => undefined, fatal: () => undefined } as unknown as Logger;

/** An answering service in a process of its own (built runtime), so that it can be killed: says `took <subject>` when a request arrives. */
function answererProcess(): Promise<{ child: ChildProcess; took(subject: string): Promise<void> }> {
  const runtime = new URL('../dist/index.js', import.meta.url).href;
  const script = join(dir, `answerer-${Date.now()}.mjs`);
  writeFileSync(
    script,
    `import { createBusServer, defineHandler, registerHandlers } from ${JSON.stringify(runtime)};
const log = { warn() {}, info() {}, error() {}, debug() {}, fatal() {} };
const any = { safeParse: (x) => ({ success: true, data: x }) };
const server = createBusServer(process.env.NATS_URL, 'alive');
registerHandlers(server, [
  defineHandler({ subject: 'alive.echo', request: any, handle: async (x) => x }),
  defineHandler({ subject: 'alive.hang', request: any, handle: () => { process.stdout.write('took alive.hang\\n'); return new Promise(() => {}); } }),
], log);
await server.listen();
process.stdout.write('listening\\n');
`,
  );
  const child = spawn(process.execPath, [script], { env: { ...process.env, NATS_URL: nats.url }, stdio: ['ignore', 'pipe', 'inherit'] });
  stops.push(() => stopChild(child, 'SIGKILL'));
  let out = '';
  const waiters: Array<() => void> = [];
  child.stdout!.on('data', (b: Buffer) => {
    out += b.toString();
    for (const w of waiters.splice(0)) w();
  });
  const saw = (line: string) =>
    new Promise<void>((res, rej) => {
      const check = () => (out.includes(line) ? res() : child.exitCode !== null ? rej(new Error(`answerer exited: ${out}`)) : waiters.push(check));
      check();
    });
  return saw('listening').then(() => ({ child, took: (subject: string) => saw(`took ${subject}`) }));
}

async function client(): Promise<BusClient> {
  const c = new BusClient(nats.url, DEFAULT_MS, 'alive-caller');
  stops.push(() => c.close());
  await c.connect();
  return c;
}

/** `ask` again until `ok` holds (10 s at most). */
async function until<T>(ask: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  const end = Date.now() + 10_000;
  let v = await ask();
  while (!ok(v) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
    v = await ask();
  }
  return v;
}

/** How a request ends: its reply, or the error it failed with, and after how long. */
async function outcome(p: Promise<unknown>): Promise<{ ms: number; reply?: unknown; err?: unknown }> {
  const started = Date.now();
  try {
    const reply = await p;
    return { ms: Date.now() - started, reply };
  } catch (err) {
    return { ms: Date.now() - started, err };
  }
}

describe('a long bus request', () => {
  it('whose answerer is killed mid-request fails as a timeout well before its own wait', async () => {
    const answerer = await answererProcess();
    const bus = await client();
    expect(await bus.request('alive.echo', { hi: 1 })).toEqual({ ok: true, data: { hi: 1 } });

    // Killed once its first working signal is out: one killed before that is an answerer the caller
    // cannot tell from an older version's, which gets the whole wait (see the second test).
    const watch = await connect({ servers: nats.url });
    stops.push(() => watch.close());
    let signalled!: () => void;
    const firstSignal = new Promise<void>((r) => {
      signalled = r;
    });
    watch.subscribe('_INBOX.>', { callback: (_err, msg) => msg.subject.endsWith(WORKING_SUFFIX) && signalled() });
    await watch.flush();
    const pending = outcome(bus.request('alive.hang', {}, ROUTE_MS));
    await answerer.took('alive.hang');
    await firstSignal;
    answerer.child.kill('SIGKILL');
    const { ms, err } = await pending;
    expect(err).toBeInstanceOf(BusUnavailableError);
    expect((err as BusUnavailableError).noResponders).toBe(false);
    expect(ms).toBeLessThan(ROUTE_MS / 2);
  }, 60_000);

  it('to an older replica after a newer one answered (a rollback, mixed replicas) still gets its whole wait', async () => {
    // Found from outside: the caller trusted the service from the new replica's answers, so a slow request
    // the old replica took (it sends no working signals) was a 503 after the idle time while it did the work.
    const answerer = await answererProcess();
    const bus = await client();
    expect(await bus.request('alive.echo', { hi: 2 })).toEqual({ ok: true, data: { hi: 2 } });
    answerer.child.kill('SIGKILL');
    // Until the server has dropped the dead process's subscription, a request could still go to it.
    await until(
      async () => (await outcome(bus.request('alive.echo', {}))).err,
      (err) => err instanceof BusUnavailableError && err.noResponders,
    );
    // The previous version's framing, without working signals, takes the same subjects in the same queue.
    const nc = await connect({ servers: nats.url });
    stops.push(() => nc.close());
    nc.subscribe('alive.hang', {
      queue: 'alive',
      callback: (_err, msg) => {
        const { id } = msg.json<{ id: string }>();
        setTimeout(() => msg.respond(JSON.stringify({ response: { ok: true, data: { old: true } }, isDisposed: true, id })), 3 * DEFAULT_MS);
      },
    });
    await nc.flush();
    const { reply, err } = await outcome(bus.request('alive.hang', {}, ROUTE_MS));
    expect(err).toBeUndefined();
    expect(reply).toEqual({ ok: true, data: { old: true } });
  }, 60_000);

  it('whose handler is alive and works for longer than the default wait is answered', async () => {
    const server = createBusServer(nats.url, 'alive-slow');
    registerHandlers(
      server,
      [
        defineHandler({
          subject: 'slow.work',
          request: z.object({ ms: z.number() }),
          handle: ({ ms }) => new Promise((r) => setTimeout(() => r({ worked: ms }), ms)),
        }),
      ],
      quiet,
    );
    stops.push(() => server.close());
    await server.listen();
    const bus = await client();
    expect(await bus.request('slow.work', { ms: 1 })).toEqual({ ok: true, data: { worked: 1 } });
    const { reply, err } = await outcome(bus.request('slow.work', { ms: 8000 }, ROUTE_MS));
    expect(err).toBeUndefined();
    expect(reply).toEqual({ ok: true, data: { worked: 8000 } });
  }, 60_000);

  it('to an answerer of an older version (no working signals) still gets its whole wait', async () => {
    // The previous version's framing: no working signals.
    const nc = await connect({ servers: nats.url });
    stops.push(() => nc.close());
    nc.subscribe('old.work', {
      queue: 'old',
      callback: (_err, msg) => {
        const { id, data } = msg.json<{ id: string; data: { ms: number } }>();
        setTimeout(() => msg.respond(JSON.stringify({ response: { ok: true, data: { worked: data.ms } }, isDisposed: true, id })), data.ms);
      },
    });
    await nc.flush();
    const bus = await client();
    expect(await bus.request('old.work', { ms: 1 })).toEqual({ ok: true, data: { worked: 1 } });
    const { reply, err } = await outcome(bus.request('old.work', { ms: 6000 }, ROUTE_MS));
    expect(err).toBeUndefined();
    expect(reply).toEqual({ ok: true, data: { worked: 6000 } });
  }, 60_000);
});
