import { Poller } from '@sb/runtime';
import { confirmAttempt } from './charge.js';
import type { Deps } from './deps.js';

/** How many paid attempts one round tries to confirm, and how many old attempts it deletes. */
const CONFIRM_BATCH = 20;
const PRUNE_BATCH = 1_000;
/** Finished attempts are kept this long (the in-flight claim needs none of them; they explain a charge). */
const KEEP_DAYS = 30;

/**
 * Each round: preimages the payments service could not take when the wallet paid (it was away) are given
 * to it again, until it is back; attempts finished more than 30 days ago are deleted, a batch at a time
 * (a full batch runs the next round at once).
 */
export function attemptsSweeper(d: Deps, intervalMs: number): Poller {
  return new Poller(
    'nwc attempts',
    intervalMs,
    async () => {
      for (const attempt of await d.attempts.unconfirmed(d.db, CONFIRM_BATCH)) {
        // Payments is still away: the rest waits for the next round.
        if ((await confirmAttempt(d, attempt)) === 'unavailable') break;
      }
      return (await d.attempts.prune(d.db, KEEP_DAYS, PRUNE_BATCH)) === PRUNE_BATCH;
    },
    d.log,
  );
}
