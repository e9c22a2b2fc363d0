import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startNats } from '../../../scripts/stack.mjs';
import { JetStreamApiError } from '@nats-io/jetstream';
import { creatingStream, DevClock } from '../src/nats.js';
import { ensureEventsStream } from '../src/outbox.js';

/**
 * The services of one system start side by side and each makes sure the events stream and the dev clock's
 * bucket exist. On a fresh nats-server they race to add them (found in CI: billing refused to start with
 * "subjects overlap with an existing stream").
 */
let nats: Awaited<ReturnType<typeof startNats>>;
let natsDir: string;
let conns: NatsConnection[] = [];

beforeEach(async () => {
  natsDir = mkdtempSync(join(tmpdir(), 'sb-nats-'));
  nats = await startNats(natsDir);
  conns = await Promise.all(Array.from({ length: 8 }, () => connect({ servers: nats.url, ...nats.operator })));
});
afterEach(async () => {
  for (const nc of conns) await nc.close();
  await nats?.stop();
  rmSync(natsDir, { recursive: true, force: true });
});

describe('services adding the same stream at once', () => {
  it('all start: the events stream', async () => {
    const results = await Promise.allSettled(conns.map((nc) => ensureEventsStream(nc)));
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
  });

  it('all start: the dev clock bucket, and they share one clock', async () => {
    const results = await Promise.allSettled(conns.map((nc) => DevClock.start(nc)));
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    const clocks = results.map((r) => (r as PromiseFulfilledResult<DevClock>).value);
    await clocks[0]!.advance(5000);
    await expect.poll(() => clocks.map((c) => c.offset)).toEqual(clocks.map(() => 5000));
  });
});

describe('creatingStream', () => {
  // The race is the server's and rare on one machine; its two answers are replayed here as the server words them.
  const race = (err_code: number, description: string) => new JetStreamApiError({ code: 400, err_code, description });

  it('tries again after "subjects overlap" or "name already in use", and gives up after a few tries', async () => {
    let calls = 0;
    const answers = [race(10065, 'subjects overlap with an existing stream'), race(10058, 'stream name already in use with a different configuration')];
    await expect(creatingStream(async () => (calls++ < answers.length ? Promise.reject(answers[calls - 1]) : 'made'))).resolves.toBe('made');
    expect(calls).toBe(3);

    calls = 0;
    await expect(creatingStream(async () => (calls++, Promise.reject(race(10065, 'subjects overlap with an existing stream'))), 3)).rejects.toThrow(
      'subjects overlap',
    );
    expect(calls).toBe(3);
  });

  it('does not try again after any other error', async () => {
    let calls = 0;
    await expect(creatingStream(async () => (calls++, Promise.reject(race(10047, 'insufficient storage resources available'))))).rejects.toThrow(
      'insufficient',
    );
    await expect(creatingStream(async () => (calls++, Promise.reject(new Error('connection closed'))))).rejects.toThrow('connection closed');
    expect(calls).toBe(2);
  });
});
