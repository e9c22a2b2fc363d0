import { describe, expect, it } from 'vitest';
import { chargeRefusal } from '../src/domain/charge.js';

describe('chargeRefusal', () => {
  it('asks an active connection within its limit', () => {
    expect(chargeRefusal({ is_active: true, max_amount_sats: 1000 }, 1000)).toBeNull();
    expect(chargeRefusal({ is_active: true, max_amount_sats: null }, 10_000_000)).toBeNull();
  });
  it('refuses a deactivated connection', () => {
    expect(chargeRefusal({ is_active: false, max_amount_sats: null }, 1)?.code).toBe('UNAUTHORIZED');
  });
  it('refuses an amount above the limit, naming both', () => {
    const r = chargeRefusal({ is_active: true, max_amount_sats: 999 }, 1000);
    expect(r?.code).toBe('QUOTA_EXCEEDED');
    expect(r?.message).toContain('1000');
    expect(r?.message).toContain('999');
  });
});
