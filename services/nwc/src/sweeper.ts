import { Poller } from '@sb/runtime';
import { confirmAttempt, forgiveIfPaidLate } from './charge.js';
import type { Deps } from './deps.js';
import { LATE_PAYMENT_WINDOW_S, MAY_PAY_LATER_CODES, WRONG_PREIMAGE } from './domain/charge.js';

/** How many paid attempts one round tries to confirm, failed ones it looks at again, and old attempts it deletes. */
const CONFIRM_BATCH = 20;
const RECHECK_BATCH = 100;
const PRUNE_BATCH = 1_000;
/** Finished attempts are kept this long (the in-flight claim needs none of them; they explain a charge). */
const KEEP_DAYS = 30;
/** The longest a look at a failed attempt's invoice waits for the payments service: a hung one ends the round's looks. */
const RECHECK_TIMEOUT_MS = 2_000;

/**
 * Each round: preimages the payments service could not take when the wallet paid (it was away) are given
 * to it again, until it is back; failures of the last minutes whose wallet may have paid after all and
 * whose invoice got paid meanwhile stop counting (LATE_PAYMENT_WINDOW_S); attempts finished more than 30
 * days ago are deleted, a batch at a time (a full batch runs the next round at once). A payments service
 * that does not answer ends the round's calls to it, as does stop().
 */
export function attemptsSweeper(d: Deps, intervalMs: number): Poller {
  const poller: Poller = new Poller(
    'nwc attempts',
    intervalMs,
    async () => {
      for (const attempt of await d.attempts.unconfirmed(d.db, CONFIRM_BATCH)) {
        // Payments is still away: the rest waits for the next round.
        if (poller.stopping || (await confirmAttempt(d, attempt)) === 'unavailable') break;
      }
      const timeoutMs = Math.min(RECHECK_TIMEOUT_MS, d.busTimeoutMs);
      for (const attempt of await d.attempts.recentlyFailed(d.db, LATE_PAYMENT_WINDOW_S, MAY_PAY_LATER_CODES, RECHECK_BATCH, WRONG_PREIMAGE)) {
        if (poller.stopping || (await forgiveIfPaidLate(d, attempt, timeoutMs)) === 'unavailable') break;
      }
      return (await d.attempts.prune(d.db, KEEP_DAYS, PRUNE_BATCH)) === PRUNE_BATCH;
    },
    d.log,
  );
  return poller;
}
