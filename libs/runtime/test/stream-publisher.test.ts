import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DiscardPolicy, JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../scripts/stack.mjs';
import { BusUnavailableError } from '../src/errors.js';
import { StreamPublisher } from '../src/outbox.js';

/** The outbox relay publishes to JetStream on its own reply inbox, against a real nats-server. */
let dir: string;
let nats: Awaited<ReturnType<typeof startNats>>;
let nc: NatsConnection;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sb-pub-'));
  nats = await startNats(dir);
  nc = await connect({ servers: nats.url, ...nats.operator });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'PUBTEST', subjects: ['pubtest.>'], duplicate_window: 60_000_000_000 });
  await jsm.streams.add({ name: 'FULL', subjects: ['full.>'], max_msgs: 1, discard: DiscardPolicy.New });
});
afterAll(async () => {
  await nc?.close();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('StreamPublisher', () => {
  it('is acknowledged by the stream once; the same message id again is a duplicate, stored once', async () => {
    const pub = new StreamPublisher(nc);
    const first = await pub.publish('pubtest.a', '{"n":1}', 'evt_1', headers());
    expect(first).toEqual({ stream: 'PUBTEST', seq: 1, duplicate: false });
    const again = await pub.publish('pubtest.a', '{"n":1}', 'evt_1', headers());
    expect(again).toEqual({ stream: 'PUBTEST', seq: 1, duplicate: true });
    const many = await Promise.all(Array.from({ length: 50 }, (_, i) => pub.publish('pubtest.b', `{"i":${i}}`, `evt_b${i}`, headers())));
    expect(new Set(many.map((a) => a.seq)).size).toBe(50);
    const info = await (await jetstreamManager(nc)).streams.info('PUBTEST');
    expect(info.state.messages).toBe(51);
    const stored = await (await jetstreamManager(nc)).streams.getMessage('PUBTEST', { seq: 1 });
    expect(stored?.header.get('Nats-Msg-Id')).toBe('evt_1');
    expect(stored?.json()).toEqual({ n: 1 });
  });

  it("fails with the stream's own error, or at once when no stream takes the subject", async () => {
    const pub = new StreamPublisher(nc);
    await pub.publish('full.a', '{}', 'evt_f1', headers());
    const refused = await pub.publish('full.a', '{}', 'evt_f2', headers()).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(JetStreamApiError);
    expect((refused as JetStreamApiError).message).toMatch(/maximum messages/);
    await expect(pub.publish('nowhere.a', '{}', 'evt_n1', headers())).rejects.toBeInstanceOf(BusUnavailableError);
  });
});
