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
    expect(await worker.round()).toBe(true);
    expect(started).toEqual(['n1', 'n2']);
    // Their leases are over, both still under way: the next round leaves them out, and finds none.
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

  it('keeps to a share per group: a group that never ends holds its share only, and a fast one is claimed for as its pieces end (found from outside)', async () => {
    // Pieces are "group:n"; the hung group's never end, the fast group's at once.
    const due = [...Array.from({ length: 10 }, (_, i) => `hung:${i}`), ...Array.from({ length: 30 }, (_, i) => `fast:${i}`)];
    const busySeen: Map<string, number>[] = [];
    const done: string[] = [];
    const hung: (() => void)[] = [];
    const share = 4;
    const worker = new ClaimingWorker<string>('test', 60_000, pino({ level: 'silent' }), {
      inFlight: 100,
      claim: 10,
      // As the claim SQL does: of each group only as many as make its share with those under way.
      claimDue: async (want, _running, busy) => {
        busySeen.push(new Map(busy));
        const taken = new Map<string, number>();
        const out: string[] = [];
        for (const id of [...due]) {
          const g = id.split(':')[0]!;
          if ((busy.get(g) ?? 0) + (taken.get(g) ?? 0) >= share || out.length >= want) continue;
          taken.set(g, (taken.get(g) ?? 0) + 1);
          out.push(id);
          due.splice(due.indexOf(id), 1);
        }
        return out;
      },
      idOf: (id) => id,
      groupOf: (id) => id.split(':')[0]!,
      perGroup: share,
      run: async (id) => {
        if (id.startsWith('hung')) await new Promise<void>((r) => hung.push(r));
        done.push(id);
      },
      failed: () => undefined,
    });
    // As the poller runs it: round after round while it says more may be due. A round held back by a
    // share waits for pieces to end, not for the poll interval (60 s here: the test would time out).
    while (done.length < 30 && (await worker.round()));
    expect(done.filter((id) => id.startsWith('fast'))).toHaveLength(30);
    expect(hung).toHaveLength(share);
    // Never more than a share of a group under way: the claims were told so.
    expect(busySeen.every((b) => (b.get('hung') ?? 0) <= share && (b.get('fast') ?? 0) <= share)).toBe(true);
    for (const r of hung) r();
    await new Promise((r) => setImmediate(r));
    await worker.stop();
  });

  it('a group whose piece ran into its timeout is counted at a slow share until one of its pieces ends in time', async () => {
    const busySeen: Map<string, number>[] = [];
    let due: string[] = ['mail:1'];
    let timesOut = true;
    const worker = new ClaimingWorker<string>('test', 60_000, pino({ level: 'silent' }), {
      inFlight: 32,
      claim: 8,
      claimDue: async (_want, _running, busy) => {
        busySeen.push(new Map(busy));
        const out = due;
        due = [];
        return out;
      },
      idOf: (id) => id,
      groupOf: (id) => id.split(':')[0]!,
      perGroup: 16,
      slow: { share: 2, forMs: 60_000 },
      run: async () => timesOut,
      failed: () => undefined,
    });
    const settled = () => new Promise((r) => setImmediate(r));
    await worker.round();
    await settled();
    // Timed out: the group counts as 16 - 2 under way with none running, so the claim takes 2 of it at most.
    due = ['mail:2'];
    timesOut = false;
    await worker.round();
    expect(busySeen.at(-1)).toEqual(new Map([['mail', 14]]));
    await settled();
    // That one ended in time: its full share again.
    await worker.round();
    expect(busySeen.at(-1)).toEqual(new Map());
    await worker.stop();
  });

  it('a slow group with its few places taken does not hold the next round for the poll interval (found in review)', async () => {
    let due: string[] = ['hung:1'];
    const never = new Promise<boolean>(() => undefined);
    const worker = new ClaimingWorker<string>('test', 2_000, pino({ level: 'silent' }), {
      inFlight: 400,
      claim: 50,
      claimDue: async () => {
        const out = due;
        due = [];
        return out;
      },
      idOf: (id) => id,
      groupOf: (id) => id.split(':')[0]!,
      perGroup: 100,
      slow: { share: 4, forMs: 60_000 },
      // The first hung piece times out at once (the group is slow); the next ones never end.
      run: async (id) => (id === 'hung:1' ? true : id.startsWith('hung') ? never : false),
      failed: () => undefined,
    });
    await worker.round();
    await new Promise((r) => setImmediate(r));
    due = ['hung:2', 'hung:3', 'hung:4', 'hung:5'];
    await worker.round();
    due = ['fast:1'];
    const started = Date.now();
    await worker.round();
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});
