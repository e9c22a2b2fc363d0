/** Waits after the 1st, 2nd, ... failed attempt; the last one repeats. */
const RETRY_DELAYS_S = [30, 120, 600, 3600, 6 * 3600, 12 * 3600, 24 * 3600];
/** A delivery is retried until this long after its first attempt, then given up. */
export const GIVE_UP_AFTER_S = 3 * 86_400;

/**
 * When to try again after `attemptsMade` failed attempts, or null to give up. The last try is pulled in
 * to the deadline itself, so a receiver that comes back on day three still gets the event.
 */
export function nextAttemptAt(attemptsMade: number, firstAttemptAt: number, now: number): number | null {
  const deadline = firstAttemptAt + GIVE_UP_AFTER_S;
  if (now >= deadline) return null;
  const delay = RETRY_DELAYS_S[Math.min(Math.max(attemptsMade, 1), RETRY_DELAYS_S.length) - 1]!;
  return Math.min(now + delay, deadline);
}
