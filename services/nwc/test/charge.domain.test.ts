import { describe, expect, it } from 'vitest';
import { chargeRefusal, sharedOutcome } from '../src/domain/charge.js';

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

describe('sharedOutcome', () => {
  const ended = (outcome: 'paid' | 'failed' | 'abandoned' | null, wallet_pubkey = 'aa') => ({
    outcome,
    wallet_pubkey,
    error_code: outcome === 'failed' ? ('INSUFFICIENT_BALANCE' as const) : null,
    error_message: outcome === 'failed' ? 'Empty' : null,
  });
  it('a paid payment is paid for every charge of it, whichever wallet', () => {
    expect(sharedOutcome(ended('paid', 'bb'), 'aa')).toEqual({ paid: true });
  });
  it("the same wallet's refusal is shared; another wallet's is not", () => {
    expect(sharedOutcome(ended('failed'), 'aa')).toEqual({ paid: false, code: 'INSUFFICIENT_BALANCE', message: 'Empty' });
    expect(sharedOutcome(ended('failed', 'bb'), 'aa')).toBeNull();
  });
  it('an abandoned attempt leaves the payment to be charged again', () => {
    expect(sharedOutcome(ended('abandoned'), 'aa')).toBeNull();
  });
});
