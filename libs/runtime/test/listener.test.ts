import { describe, expect, it } from 'vitest';
import { Listener } from '../src/listener.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('Listener', () => {
  it('is not up after a try that a loss overtook: the loss came after the try had looked (found in review)', async () => {
    let tries = 0;
    const listener: Listener = new Listener(
      'test answers',
      async () => {
        tries++;
        // The server drops the subscription after this try's round trip, before the try ends.
        await sleep(1);
        if (tries === 1) listener.lost(new Error('subscription dropped'));
      },
      { firstMs: 10 },
    );
    await listener.run();
    expect(listener.up).toBe(false);
    for (let i = 0; i < 100 && !listener.up; i++) await sleep(10);
    expect(tries).toBe(2);
    expect(listener.up).toBe(true);
    listener.stop();
  });

  it('a loss while up is tried again after the first wait, and up once that try succeeds', async () => {
    let tries = 0;
    const listener = new Listener(
      'test answers',
      async () => {
        tries++;
      },
      { firstMs: 10 },
    );
    await listener.run();
    expect(listener.up).toBe(true);
    listener.lost(new Error('dropped'));
    expect(listener.up).toBe(false);
    for (let i = 0; i < 100 && !listener.up; i++) await sleep(10);
    expect(tries).toBe(2);
    expect(listener.up).toBe(true);
    listener.stop();
  });
});
