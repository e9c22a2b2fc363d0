import { describe, expect, it } from 'vitest';
import { idTimeMs, newId } from '../src/ids.js';

describe('newId', () => {
  it('has the prefix and 26 base32 characters', () => {
    expect(newId('plan_')).toMatch(/^plan_[0-9a-hjkmnp-tv-z]{26}$/);
  });

  it('sorts by creation time', () => {
    const ids = [1, 2, 1000, 1_700_000_000_000].map((t) => newId('x_', t));
    expect([...ids].sort()).toEqual(ids);
  });

  it('is unique within one millisecond, across refills of the random pool', () => {
    // 10 random bytes an id from an 8 KiB pool: 5,000 ids refill it six times.
    const ids = Array.from({ length: 5000 }, () => newId('x_', 42));
    expect(new Set(ids).size).toBe(5000);
    expect(new Set(ids.map((id) => id.slice(-16))).size).toBe(5000);
  });
});

describe('idTimeMs', () => {
  it('reads back the milliseconds an id was made at', () => {
    for (const t of [0, 1, 999, 1_764_000_000_123, 2 ** 48 - 1]) expect(idTimeMs(newId('evt_', t), 'evt_')).toBe(t);
  });

  it('is null for another prefix, length or alphabet', () => {
    const id = newId('evt_', 5);
    expect(idTimeMs(id, 'pay_')).toBeNull();
    expect(idTimeMs(id.slice(0, -1), 'evt_')).toBeNull();
    expect(idTimeMs(`evt_${'u'.repeat(26)}`, 'evt_')).toBeNull();
  });
});
