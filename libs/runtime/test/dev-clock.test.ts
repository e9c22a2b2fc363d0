import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../scripts/stack.mjs';
import { DevClock } from '../src/nats.js';

/** The dev clock's offset lives in one NATS KV key shared by every service (a private nats-server here). */
let nats: Awaited<ReturnType<typeof startNats>>;
let natsDir: string;
const conns: NatsConnection[] = [];

beforeAll(async () => {
  natsDir = mkdtempSync(join(tmpdir(), 'sb-nats-'));
  nats = await startNats(natsDir);
});
afterAll(async () => {
  for (const nc of conns) await nc.close();
  await nats?.stop();
  rmSync(natsDir, { recursive: true, force: true });
});

const clock = async () => {
  const nc = await connect({ servers: nats.url, ...nats.operator });
  conns.push(nc);
  return DevClock.start(nc);
};

describe('DevClock.advance', () => {
  it('loses no move when several run at once, from one process or several', async () => {
    const [a, b] = [await clock(), await clock()];
    const moves = Array.from({ length: 12 }, (_, i) => (i % 2 ? a : b).advance(1000));
    const results = await Promise.all(moves);
    // Each move saw the one before it: the offsets handed back are all different.
    expect(new Set(results).size).toBe(12);
    expect(Math.max(...results)).toBe(12_000);
    const fresh = await clock();
    expect(fresh.offset).toBe(12_000);
    expect(await a.advance(0)).toBe(12_000);
  });
});

describe('DevClock.hold', () => {
  it('holds time still for every process, moves it while held, and lets it run on from where it stood', async () => {
    const [a, b] = [await clock(), await clock()];
    await a.hold(true);
    const held = a.nowMs();
    await new Promise((r) => setTimeout(r, 20));
    expect(a.nowMs()).toBe(held);
    expect(a.held).toBe(true);
    // Another process sees it too, from the key.
    const fresh = await clock();
    expect(fresh.nowMs()).toBe(held);
    await b.advance(5000);
    expect(b.nowMs()).toBe(held + 5000);
    await a.hold(false);
    expect(a.held).toBe(false);
    const after = a.nowMs();
    expect(after).toBeGreaterThanOrEqual(held + 5000);
    expect(after - (held + 5000)).toBeLessThan(1000);
  });
});
