import { routeHandler, unixSeconds } from '@sb/runtime';
import type { Deps } from '../deps.js';
import type { Scheduler } from '../scheduler.js';

/**
 * How long the answer waits for the sweep that follows a move: well inside the route's bus wait, so
 * the caller always learns that the clock moved (a 503 would make it move the clock again on retry).
 */
const SWEEP_WAIT_MS = 20_000;

/**
 * DEV_MODE only: holds or releases the shared test clock, moves it, then runs a scheduler sweep so the
 * move shows at once.
 * A sweep that takes longer (thousands of renewals) or fails (database away) goes on in the background,
 * and the scheduler's own ticks finish it.
 */
export const devClock = (d: Deps, scheduler: Scheduler) =>
  routeHandler('dev.clock', async (req) => {
    const clock = d.devClock!;
    const advance = (req.body?.advance_seconds as number | undefined) ?? 0;
    const hold = req.body?.hold as boolean | undefined;
    if (hold !== undefined) await clock.hold(hold);
    if (advance > 0) {
      await clock.advance(advance * 1000);
      const sweep = scheduler.tickFromNow().then(
        () => true,
        (err) => (d.log.warn({ err }, 'sweep after a clock move failed; the scheduler retries it'), true),
      );
      const waited = await Promise.race([sweep, new Promise<false>((r) => setTimeout(() => r(false), SWEEP_WAIT_MS).unref())]);
      if (!waited) d.log.info({ advance_seconds: advance }, 'clock moved; its sweep goes on in the background');
    }
    return { now: unixSeconds(clock), offset_seconds: Math.round(clock.offset / 1000), held: clock.held };
  });
