import { describe, expect, it } from 'vitest';
import { satsText } from '../src/index.js';

describe('satsText', () => {
  // Found by a probe of subscriber notices: "Amount: 1 sats".
  it('says "sat" for one and "sats" for any other amount, grouped by thousands', () => {
    expect(satsText(1)).toBe('1 sat');
    expect(satsText(0)).toBe('0 sats');
    expect(satsText(2)).toBe('2 sats');
    expect(satsText(21_000)).toBe('21,000 sats');
  });
});
