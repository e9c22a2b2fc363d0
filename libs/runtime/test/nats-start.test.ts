import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, startNats, startService } from '../../../scripts/stack.mjs';
import { createDatabase } from '../../../test/support/stack.js';
import { BusClient } from '../src/bus.js';
import { BusUnavailableError } from '../src/errors.js';
import { connectNatsWhenReachable } from '../src/nats.js';

/**
 * A service started before NATS (the order is not guaranteed on Kubernetes) waits for it instead of
 * exiting (found from outside: billing exited with "connection refused", naming neither NATS nor where).
 */
const dirs: string[] = [];
const stops: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function recorder() {
  const lines: string[] = [];
  return { lines, log: { warn: (obj: object, msg: string) => void lines.push(`${msg} ${JSON.stringify(obj)}`) } };
}

describe('a service starting before NATS', () => {
  it('waits, saying where it looks (without the password), and connects once the server is up', async () => {
    const port = await freePort();
    const { lines, log } = recorder();
    const waiting = connectNatsWhenReachable(`nats://someone:s3cret@127.0.0.1:${port}`, 'test', log, 100);
    await new Promise((r) => setTimeout(r, 700));
    // Several tries by now (0.1 s doubling), one line: a failure is logged once per kind, not per try.
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('NATS not reachable yet');
    expect(lines[0]).toContain(`nats://127.0.0.1:${port}`);
    expect(lines.join('\n')).not.toContain('s3cret');
    const dir = mkdtempSync(join(tmpdir(), 'sb-nats-start-'));
    dirs.push(dir);
    const nats = await startNats(dir, { port });
    stops.push(nats.stop);
    const nc = await waiting;
    expect(nc.isClosed()).toBe(false);
    await nc.close();
  });

  it('a service (payments) started with no NATS server waits, and is ready once one answers', async () => {
    const database = await createDatabase('sb_natsstart');
    stops.push(() => database.drop());
    const port = await freePort();
    const svc = await startService('payments', { DATABASE_URL: database.url, NATS_URL: `nats://127.0.0.1:${port}`, LOG_LEVEL: 'info' }, { waitReady: false });
    stops.push(svc.stop);
    const said = () => svc.lines.some((l: string) => l.includes('NATS not reachable yet'));
    for (let i = 0; i < 100 && !said() && svc.child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    expect(svc.child.exitCode, svc.lines.join('\n')).toBeNull();
    expect(said()).toBe(true);
    const dir = mkdtempSync(join(tmpdir(), 'sb-nats-late-'));
    dirs.push(dir);
    const nats = await startNats(dir, { port });
    stops.push(nats.stop);
    let ready = false;
    for (let i = 0; i < 150 && !ready; i++) {
      ready = await fetch(`${svc.url}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (!ready) await new Promise((r) => setTimeout(r, 200));
    }
    expect(ready, svc.lines.join('\n')).toBe(true);
  });

  it('a CA file that cannot be read is a setting to fix too (found in review: waited for ever)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-nats-ca-'));
    dirs.push(dir);
    const nats = await startNats(dir, {});
    stops.push(nats.stop);
    const { lines, log } = recorder();
    const err = await connectNatsWhenReachable({ NATS_URL: nats.url, NATS_TLS_CA_FILE: join(dir, 'no-such-ca.pem') }, 'test', log, 100).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Error);
    expect(lines).toEqual([]);
  });
});

describe('a bus client whose NATS server went away', () => {
  it('answers a request unavailable at once, not at the end of its wait, and works again once NATS is back', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-nats-away-'));
    dirs.push(dir);
    const port = await freePort();
    let nats = await startNats(dir, { port });
    const client = new BusClient(nats.url, 5_000, 'test');
    await client.connect();
    const server = await connectNatsWhenReachable(nats.url, 'responder', { warn: () => undefined });
    const answer = () =>
      server.subscribe('test.echo', {
        callback: (_err, m) => m.respond(JSON.stringify({ response: { ok: true, data: 'pong' }, isDisposed: true, id: '1' })),
      });
    answer();
    await server.flush();
    expect(await client.request('test.echo', {})).toEqual({ ok: true, data: 'pong' });
    await nats.stop();
    // A request sent before the client saw its socket close is lost with it and waits its wait out (seen
    // under load); once the client knows, requests are answered unavailable at once.
    let err: unknown;
    for (let i = 0; i < 5 && !String(err).includes('NATS is not connected'); i++) {
      err = await client.request('test.echo', {}).then(
        () => undefined,
        (e: unknown) => e,
      );
    }
    expect(err).toBeInstanceOf(BusUnavailableError);
    expect(String(err)).toContain('NATS is not connected');
    nats = await startNats(dir, { port });
    stops.push(nats.stop);
    let back: unknown;
    for (let i = 0; i < 50 && !back; i++) {
      back = await client.request('test.echo', {}).catch(() => undefined);
      if (!back) await new Promise((r) => setTimeout(r, 200));
    }
    expect(back).toEqual({ ok: true, data: 'pong' });
    await client.close();
    await server.close();
  });
});
