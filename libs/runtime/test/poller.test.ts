import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { BusUnavailableError, DomainError, Poller } from '../src/index.js';

const until = async (ok: () => boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!ok() && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
};

/**
 * A poller named 'scheduler' whose round `i` runs `round(poller, i)` (the work it catches itself),
 * logging into `lines`; `before[i]` is how many lines were logged before round `i` began.
 */
function scripted(round: (poller: Poller, i: number) => void) {
  const lines: { msg: string; worker?: string }[] = [];
  const log = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) });
  const before: number[] = [];
  const poller: Poller = new Poller(
    'scheduler',
    1,
    async () => {
      before.push(lines.length);
      round(poller, before.length - 1);
      return false;
    },
    log,
    false,
  );
  return { lines, before, poller };
}

describe('Poller', () => {
  it('says an outage of the bus once, without a stack, and its end once; other failures each with their stack (found from outside: one stack per tick)', async () => {
    const lines: { level: number; msg: string; err?: { stack?: string }; error?: string }[] = [];
    const log = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) });
    /** A poller whose rounds throw the failures queued, then succeed; stopped after `n` rounds. */
    const rounds = async (n: number) => {
      let done = 0;
      const poller = new Poller(
        'sweeper',
        1,
        async () => {
          done++;
          const err = failures.shift();
          if (err) throw err;
          return false;
        },
        log,
        false,
      );
      poller.start();
      await until(() => done >= n);
      await poller.stop();
    };
    const failures: Error[] = [
      new BusUnavailableError('no responders available for the request', true),
      new BusUnavailableError('NATS is not connected'),
      new DomainError('unavailable', 'A service needed for this request is not available, please retry'),
    ];
    await rounds(5);
    expect(lines.map((l) => [l.level, l.msg, l.error, l.err])).toEqual([
      [40, 'bus or a service it asks unavailable, worker retries every tick', 'no responders available for the request', undefined],
      [30, 'bus back, worker resumed', undefined, undefined],
    ]);

    lines.length = 0;
    failures.push(new Error('a bug'), new Error('a bug'));
    await rounds(3);
    expect(lines.map((l) => [l.msg, l.err?.stack?.split('\n')[0]])).toEqual([
      ['worker tick failed, will retry', 'Error: a bug'],
      ['worker tick failed, will retry', 'Error: a bug'],
    ]);
  });

  it('an outage met by work a round catches itself is said once; its end only after a run that met none and reached the bus', async () => {
    const busDown = new BusUnavailableError('NATS is not connected');
    /** Each round: the failure it catches, if any, and whether it asked the bus anything. */
    const plan: { caught?: Error; reachedBus: boolean }[] = [
      { caught: busDown, reachedBus: true },
      { caught: busDown, reachedBus: true },
      // Nothing due: the bus may still be away.
      { reachedBus: false },
      { reachedBus: true },
      { reachedBus: true },
    ];
    const { lines, before, poller } = scripted((poller, i) => {
      const round = plan[i] ?? { reachedBus: true };
      if (round.caught) expect(poller.failed(round.caught)).toBe(true);
      expect(poller.failed(new Error('a bug'))).toBe(false);
      if (!round.reachedBus) poller.busUnreached();
    });
    poller.start();
    await until(() => before.length > plan.length);
    await poller.stop();
    expect(lines.map((l) => l.msg)).toEqual(['bus or a service it asks unavailable, worker retries every tick', 'bus back, worker resumed']);
    // Away in the first round, said once; back after the fourth, the first to reach the bus without failing.
    expect(before.slice(0, 5)).toEqual([0, 1, 1, 1, 2]);
    expect(lines.every((l) => l.worker === 'scheduler')).toBe(true);
  });

  it('a database back while the bus is still away is said; a bus outage met before a run began is kept by it (review)', async () => {
    const dbDown = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    const busDown = new BusUnavailableError('NATS is not connected');
    // Round by round: what the round's work caught.
    const plan: Error[][] = [[dbDown, busDown], [busDown], [busDown], []];
    const { lines, before, poller } = scripted((poller, i) => {
      for (const err of plan[i] ?? []) expect(poller.failed(err)).toBe(true);
    });
    // Met by a sweep run by hand before the poller's first run.
    expect(poller.failed(busDown)).toBe(true);
    poller.start();
    await until(() => before.length > plan.length + 1);
    await poller.stop();
    expect(lines.map((l) => l.msg).slice(0, 4)).toEqual([
      'bus or a service it asks unavailable, worker retries every tick',
      'database unavailable, worker retries every tick',
      'database back, worker resumed',
      'bus back, worker resumed',
    ]);
    // The database's end after the second round (the bus still away); the bus's after the fourth.
    expect(before.slice(0, 5)).toEqual([1, 2, 3, 3, 4]);
    expect(lines).toHaveLength(4);
  });
});
