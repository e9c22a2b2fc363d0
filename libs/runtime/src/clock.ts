/** The one source of time for domain code, so tests can move it. */
export interface Clock {
  nowMs(): number;
}
export const systemClock: Clock = { nowMs: () => Date.now() };
export const unixSeconds = (clock: Clock) => Math.floor(clock.nowMs() / 1000);

/**
 * `p`'s value, or `late()`'s if `p` has not settled within `ms`. `p` goes on regardless (what it does
 * still happens); a rejection before the deadline is the caller's to handle, as without this.
 */
export function within<T>(p: Promise<T>, ms: number, late: () => T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(late()), ms);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}
