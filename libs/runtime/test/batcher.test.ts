import { describe, expect, it } from 'vitest';
import { Batcher } from '../src/batcher.js';
import { BusUnavailableError } from '../src/errors.js';

const tick = () => new Promise((r) => setImmediate(r));

describe('Batcher', () => {
  it('runs the calls made together as one batch and gives each caller its own result', async () => {
    const batches: number[][] = [];
    const b = new Batcher(
      async (xs: number[]) => {
        batches.push(xs);
        return xs.map((x) => x * 10);
      },
      { maxBatch: 100, span: 'test' },
    );
    expect(await Promise.all([1, 2, 3].map((x) => b.add(x)))).toEqual([10, 20, 30]);
    expect(batches).toEqual([[1, 2, 3]]);
  });

  it('lets items wait while a batch is under way, then runs them together; batches stay within maxBatch', async () => {
    const batches: number[][] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const b = new Batcher(
      async (xs: number[]) => {
        batches.push(xs);
        if (batches.length === 1) await gate;
        return xs;
      },
      { maxBatch: 3, span: 'test' },
    );
    const first = b.add(0);
    await tick();
    await tick();
    const later = [1, 2, 3, 4, 5].map((x) => b.add(x));
    await tick();
    await tick();
    // Nothing more starts while the first batch is under way (maxConcurrent 1).
    expect(batches).toEqual([[0]]);
    release();
    expect(await Promise.all([first, ...later])).toEqual([0, 1, 2, 3, 4, 5]);
    expect(batches).toEqual([[0], [1, 2, 3], [4, 5]]);
  });

  it('when a batch fails, runs each item alone: only the bad one fails its caller', async () => {
    const batches: number[][] = [];
    const b = new Batcher(
      async (xs: number[]) => {
        batches.push(xs);
        if (xs.includes(2)) throw new Error('bad item 2');
        return xs.map((x) => -x);
      },
      { maxBatch: 100, span: 'test' },
    );
    const results = await Promise.allSettled([1, 2, 3].map((x) => b.add(x)));
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message))).toEqual([-1, 'bad item 2', -3]);
    expect(batches).toEqual([[1, 2, 3], [1], [2], [3]]);
  });

  it('when the database is away, every caller gets the error at once (no item is tried alone)', async () => {
    let calls = 0;
    const b = new Batcher(
      async (): Promise<number[]> => {
        calls++;
        throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      },
      { maxBatch: 100, span: 'test' },
    );
    const results = await Promise.allSettled([1, 2, 3].map((x) => b.add(x)));
    expect(results.every((r) => r.status === 'rejected' && /ECONNREFUSED/.test((r.reason as Error).message))).toBe(true);
    expect(calls).toBe(1);
  });

  it('when a peer service does not answer, every caller gets the error at once (no item is tried alone)', async () => {
    let calls = 0;
    const b = new Batcher(
      async (): Promise<number[]> => {
        calls++;
        throw new BusUnavailableError('billing.internal.subscription_contact timed out');
      },
      { maxBatch: 100, span: 'test' },
    );
    const results = await Promise.allSettled([1, 2, 3].map((x) => b.add(x)));
    expect(results.every((r) => r.status === 'rejected' && r.reason instanceof BusUnavailableError)).toBe(true);
    expect(calls).toBe(1);
  });
});
