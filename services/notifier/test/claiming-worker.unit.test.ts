import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { ClaimingWorker } from '../src/claiming-worker.js';

describe('ClaimingWorker', () => {
  it('never claims a piece it is still running: one outliving its lease is not started beside itself (review finding)', async () => {
    const asked: (readonly string[])[] = [];
    let due = ['n1', 'n2'];
    const release = new Map<string, () => void>();
    const started: string[] = [];
    const worker = new ClaimingWorker<string>('test', 1000, pino({ level: 'silent' }), {
      inFlight: 4,
      claim: 2,
      // As the database would after the lease ran out: every due row again, less those left out.
      claimDue: async (want, running) => {
        asked.push(running);
        return due.filter((id) => !running.includes(id)).slice(0, want);
      },
      idOf: (id) => id,
      run: (id) => {
        started.push(id);
        return new Promise<void>((r) => release.set(id, r));
      },
      failed: () => undefined,
    });
    expect(await worker.round()).toBe(false);
    expect(started).toEqual(['n1', 'n2']);
    // Their leases are over, both still under way: the next round leaves them out.
    expect(await worker.round()).toBe(false);
    expect(asked[1]).toEqual(['n1', 'n2']);
    expect(started).toEqual(['n1', 'n2']);
    // Done, and due again (a retry): claimed again.
    release.get('n1')!();
    await new Promise((r) => setImmediate(r));
    due = ['n1', 'n2'];
    await worker.round();
    expect(asked[2]).toEqual(['n2']);
    expect(started).toEqual(['n1', 'n2', 'n1']);
    for (const r of release.values()) r();
    await worker.stop();
  });
});
