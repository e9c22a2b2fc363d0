import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startNats } from '../../../scripts/stack.mjs';
import { BusClient, createBusServer, defineHandler, registerHandlers } from '../src/bus.js';

let dir: string;
let nats: Awaited<ReturnType<typeof startNats>>;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sb-drain-'));
  nats = await startNats(dir);
});
afterAll(async () => {
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('a stopping service', () => {
  it('answers the requests in flight before it closes (an NWC charge may take 45 s), and takes no new ones', async () => {
    const server = createBusServer(nats.url, 'drain-test');
    const slow = defineHandler({
      subject: 'drain.slow',
      request: z.object({ ms: z.number() }),
      handle: async ({ ms }) => (await new Promise((r) => setTimeout(r, ms)), { waited: ms }),
    });
    registerHandlers(server, [slow], pino({ level: 'silent' }));
    await new Promise<void>((resolve, reject) => server.listen((err?: unknown) => (err ? reject(err) : resolve())));
    const bus = new BusClient(nats.url, 10_000, 'drain-client');
    await bus.connect();
    try {
      const inFlight = bus.request('drain.slow', { ms: 2500 });
      await new Promise((r) => setTimeout(r, 300));
      const started = Date.now();
      const closed = server.close().then(() => Date.now() - started);
      // A request after the close began finds nobody (the subscription is gone), not a dying server.
      await new Promise((r) => setTimeout(r, 100));
      await expect(bus.request('drain.slow', { ms: 1 })).rejects.toThrow(/no responders/);
      expect(await inFlight).toEqual({ ok: true, data: { waited: 2500 } });
      // Nest's own close would have dropped it after its fixed 0.5 s grace period.
      expect(await closed).toBeGreaterThanOrEqual(1800);
    } finally {
      await bus.close();
    }
  });
});

describe('a replica stopping under load', () => {
  it('answers every request the server sent it before the unsubscribe; the other replica takes the rest', async () => {
    const replica = async () => {
      const server = createBusServer(nats.url, 'flood');
      registerHandlers(
        server,
        [defineHandler({ subject: 'flood.echo', request: z.object({ i: z.number() }), handle: async ({ i }) => ({ i }) })],
        pino({ level: 'silent' }),
      );
      await new Promise<void>((resolve, reject) => server.listen((err?: unknown) => (err ? reject(err) : resolve())));
      return server;
    };
    const [a, b] = [await replica(), await replica()];
    const bus = new BusClient(nats.url, 10_000, 'flood-client');
    await bus.connect();
    try {
      const asked: Promise<unknown>[] = [];
      let closing: Promise<void> | undefined;
      for (let i = 0; i < 4000; i++) {
        asked.push(bus.request('flood.echo', { i }, 3_000).catch((err: Error) => err.message));
        if (i === 2000) closing = a.close();
        if (i % 50 === 0) await new Promise((r) => setImmediate(r));
      }
      const replies = await Promise.all(asked);
      await closing;
      expect(replies.filter((r, i) => JSON.stringify(r) !== JSON.stringify({ ok: true, data: { i } }))).toEqual([]);
    } finally {
      await bus.close();
      await b.close();
    }
  });
});

describe('a service answering', () => {
  it('checks its answer against the contract before it leaves: a broken one is an internal error with an id', async () => {
    const server = createBusServer(nats.url, 'contract-test');
    const answer = (subject: string, out: unknown) =>
      defineHandler({ subject, request: z.object({}), response: z.object({ n: z.number() }), handle: async () => out });
    registerHandlers(server, [answer('contract.good', { n: 1 }), answer('contract.broken', { n: 'one' })], pino({ level: 'silent' }));
    await new Promise<void>((resolve, reject) => server.listen((err?: unknown) => (err ? reject(err) : resolve())));
    const bus = new BusClient(nats.url, 10_000, 'contract-client');
    await bus.connect();
    try {
      expect(await bus.request('contract.good', {})).toEqual({ ok: true, data: { n: 1 } });
      const broken = await bus.request('contract.broken', {});
      expect(broken).toMatchObject({ ok: false, error: { kind: 'internal' } });
      expect(JSON.stringify(broken)).toMatch(/Unexpected error! ID: err_/);
      expect(JSON.stringify(broken)).not.toContain('one');
    } finally {
      await bus.close();
      await server.close();
    }
  });

  it('an answer NATS or JSON cannot carry is an internal error with an id at once, not a timeout', async () => {
    const server = createBusServer(nats.url, 'oversize-test');
    const answer = (subject: string, out: () => unknown) => defineHandler({ subject, request: z.object({}), handle: async () => out() });
    registerHandlers(
      server,
      [answer('oversize.big', () => ({ s: 'x'.repeat(2 * 1024 * 1024) })), answer('oversize.bigint', () => ({ n: 1n }))],
      pino({ level: 'silent' }),
    );
    await new Promise<void>((resolve, reject) => server.listen((err?: unknown) => (err ? reject(err) : resolve())));
    const bus = new BusClient(nats.url, 10_000, 'oversize-client');
    await bus.connect();
    try {
      for (const subject of ['oversize.big', 'oversize.bigint']) {
        // A reply that never came would reject with a timeout here.
        const reply = await bus.request(subject, {}, 5_000);
        expect(reply).toMatchObject({ ok: false, error: { kind: 'internal' } });
        expect(JSON.stringify(reply)).toMatch(/Unexpected error! ID: err_/);
      }
    } finally {
      await bus.close();
      await server.close();
    }
  });

  it('a closing client still takes the replies on their way', async () => {
    const server = createBusServer(nats.url, 'client-close-test');
    const slow = defineHandler({
      subject: 'client.slow',
      request: z.object({}),
      handle: async () => (await new Promise((r) => setTimeout(r, 800)), { done: true }),
    });
    registerHandlers(server, [slow], pino({ level: 'silent' }));
    await new Promise<void>((resolve, reject) => server.listen((err?: unknown) => (err ? reject(err) : resolve())));
    const bus = new BusClient(nats.url, 10_000, 'client-close');
    await bus.connect();
    try {
      const inFlight = bus.request('client.slow', {});
      await new Promise((r) => setTimeout(r, 100));
      const closed = bus.close();
      expect(await inFlight).toEqual({ ok: true, data: { done: true } });
      await closed;
    } finally {
      await server.close();
    }
  });
});
