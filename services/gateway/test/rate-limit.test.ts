import { describe, expect, it } from 'vitest';
import { RateLimiter } from '../src/domain/rate-limit.js';

describe('RateLimiter', () => {
  it('lets a burst of `capacity` through, then asks to wait, then refills over the window', () => {
    let now = 0;
    const rl = new RateLimiter(30, 60_000, () => now);
    for (let i = 0; i < 30; i++) expect(rl.take('ip')).toBe(0);
    expect(rl.take('ip')).toBe(2); // one token takes 2 s at 30/min
    now += 2_000;
    expect(rl.take('ip')).toBe(0);
    expect(rl.take('ip')).toBeGreaterThan(0);
  });

  it('keeps callers apart', () => {
    const rl = new RateLimiter(1, 1000, () => 0);
    expect(rl.take('a')).toBe(0);
    expect(rl.take('b')).toBe(0);
    expect(rl.take('a')).toBe(1);
  });

  it('forgets callers whose bucket is full again', () => {
    let now = 0;
    const rl = new RateLimiter(2, 1000, () => now);
    rl.take('a');
    rl.take('b');
    expect(rl.size).toBe(2);
    now += 1000;
    rl.sweep();
    expect(rl.size).toBe(0);
  });
});
