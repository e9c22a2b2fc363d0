/**
 * Token buckets per caller (API key or client address), in the memory of one gateway replica: with N
 * replicas behind a load balancer the effective limit is up to N times the setting.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly capacity: number,
    private readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** 0 when allowed; otherwise the seconds to wait before the next request may pass. */
  take(key: string): number {
    const t = this.now();
    const rate = this.capacity / this.windowMs;
    const b = this.buckets.get(key) ?? { tokens: this.capacity, at: t };
    b.tokens = Math.min(this.capacity, b.tokens + (t - b.at) * rate);
    b.at = t;
    this.buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / rate / 1000));
  }

  /** Drops buckets that have refilled, so memory follows the number of active callers. */
  sweep(): void {
    const t = this.now();
    for (const [k, b] of this.buckets) {
      if (b.tokens + (t - b.at) * (this.capacity / this.windowMs) >= this.capacity) this.buckets.delete(k);
    }
  }

  get size(): number {
    return this.buckets.size;
  }
}
