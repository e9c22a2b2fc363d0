/** The one source of time for domain code, so tests can move it. */
export interface Clock {
  nowMs(): number;
}
export const systemClock: Clock = { nowMs: () => Date.now() };
export const unixSeconds = (clock: Clock) => Math.floor(clock.nowMs() / 1000);
