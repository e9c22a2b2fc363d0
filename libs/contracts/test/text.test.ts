import { describe, expect, it } from 'vitest';
import { fiatText, satsText } from '../src/index.js';

describe('satsText', () => {
  // Found by a probe of subscriber notices: "Amount: 1 sats".
  it('says "sat" for one and "sats" for any other amount, grouped by thousands', () => {
    expect(satsText(1)).toBe('1 sat');
    expect(satsText(0)).toBe('0 sats');
    expect(satsText(2)).toBe('2 sats');
    expect(satsText(21_000)).toBe('21,000 sats');
  });
});

describe('fiatText', () => {
  it("writes an amount with its currency's symbol, decimals and ISO code, once", () => {
    expect(fiatText(21, 'usd')).toBe('$21.00 USD');
    expect(fiatText(1.05, 'eur')).toBe('€1.05 EUR');
    // Zero-decimal currencies have no cents.
    expect(fiatText(2100, 'jpy')).toBe('¥2,100 JPY');
    // A code that is its own symbol is not said twice.
    expect(fiatText(21, 'chf').replace(/\s/g, ' ')).toBe('CHF 21.00');
    expect(fiatText(3.5, 'xyzz')).toBe('3.5 XYZZ');
  });
});
