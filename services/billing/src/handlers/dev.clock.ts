import { routeHandler, unixSeconds } from '@sb/runtime';
import type { Deps } from '../deps.js';
import type { Scheduler } from '../scheduler.js';

/** DEV_MODE only: moves the shared test clock, then runs a scheduler sweep so the move shows at once. */
export const devClock = (d: Deps, scheduler: Scheduler) =>
  routeHandler('dev.clock', async (req) => {
    const clock = d.devClock!;
    const advance = (req.body?.advance_seconds as number | undefined) ?? 0;
    if (advance > 0) {
      await clock.advance(advance * 1000);
      await scheduler.tickFromNow();
    }
    return { now: unixSeconds(clock), offset_seconds: Math.round(clock.offset / 1000) };
  });
