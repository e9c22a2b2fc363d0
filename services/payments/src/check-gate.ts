import { setTimeout as sleep } from 'node:timers/promises';

/** Checks of one payment the public routes may start, at most one per this. */
export const PUBLIC_CHECK_INTERVAL_MS = 1_000;

/**
 * At most one provider status check of a payment per `intervalMs` from the public routes: the checkout
 * page's status poll and callbacks whose outcome is the provider's own status (the charge server, LNbits).
 * Anyone who knows a payment's id or hash (both public) could make this service ask the operator's
 * provider account as often as the public rate limit lets them, and get that account throttled. In this
 * process, in real time (a provider's limits do not follow the test clock); each replica has its own.
 */
export class CheckGate {
  /** When each payment was last checked, oldest first (a check moves its payment to the end). */
  private readonly last = new Map<string, number>();

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Takes the turn to check payment `id` now; false when a check of it started within the interval. */
  take(id: string): boolean {
    const t = this.now();
    const prev = this.last.get(id);
    if (prev !== undefined && t - prev < this.intervalMs) return false;
    this.last.delete(id);
    this.last.set(id, t);
    for (const [k, at] of this.last) {
      if (t - at < this.intervalMs) break;
      this.last.delete(k);
    }
    return true;
  }

  /**
   * For a callback, which must not be lost: waits, if need be, for a check that starts after it arrived.
   * True when that check is this caller's to make; false when another caller's started after it arrived
   * (what that one finds is applied, so this callback's news is not lost).
   */
  async turn(id: string): Promise<boolean> {
    const arrived = this.now();
    while (!this.take(id)) {
      const prev = this.last.get(id) ?? arrived;
      if (prev > arrived) return false;
      await sleep(prev + this.intervalMs - this.now() + 1);
    }
    return true;
  }
}
