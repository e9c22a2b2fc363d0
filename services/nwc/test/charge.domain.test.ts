import { describe, expect, it } from 'vitest';
import { chargeRefusal, clipMessage, nextLook, recordedRefusal, sharedOutcome, WRONG_PREIMAGE } from '../src/domain/charge.js';

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

describe('nextLook', () => {
  it('a waiting charge looks after 200 ms, then doubles the pause up to 2 s', () => {
    const pauses: number[] = [];
    let pause: number | undefined;
    for (let i = 0; i < 7; i++) {
      pause = nextLook(pause, 0, 60_000)!;
      pauses.push(pause);
    }
    expect(pauses).toEqual([200, 400, 800, 1600, 2000, 2000, 2000]);
  });
  it("never sleeps past the caller's deadline, and stops at it", () => {
    expect(nextLook(1600, 10_000, 10_500)).toBe(500);
    expect(nextLook(undefined, 10_000, 10_050)).toBe(50);
    expect(nextLook(400, 10_000, 10_000)).toBeNull();
    expect(nextLook(400, 10_001, 10_000)).toBeNull();
  });
});

describe('clipMessage', () => {
  it('keeps 500 characters, never half of one (a lone surrogate is refused by JSONB)', () => {
    expect(clipMessage('short')).toBe('short');
    const long = `${'a'.repeat(499)}😀${'b'.repeat(100)}`;
    expect(clipMessage(long)).toBe(`${'a'.repeat(499)}😀`);
    expect(clipMessage('x'.repeat(2000))).toHaveLength(500);
  });
});

describe('recordedRefusal: the same request again answers as its first run did', () => {
  it('a wallet that may still pay is said so again, a definite refusal or a wrong preimage is not', () => {
    expect(recordedRefusal({ error_code: 'OTHER', error_message: 'The wallet did not answer the payment request within 4 seconds', recent: true })).toEqual({
      paid: false,
      error_code: 'OTHER',
      message: 'The wallet did not answer the payment request within 4 seconds',
      mayStillPay: true,
    });
    expect(recordedRefusal({ error_code: 'PAYMENT_FAILED', error_message: 'No route', recent: true }).mayStillPay).toBe(true);
    expect(recordedRefusal({ error_code: 'INSUFFICIENT_BALANCE', error_message: 'Empty', recent: true })).toEqual({
      paid: false,
      error_code: 'INSUFFICIENT_BALANCE',
      message: 'Empty',
    });
    expect(recordedRefusal({ error_code: 'OTHER', error_message: WRONG_PREIMAGE, recent: true })).not.toHaveProperty('mayStillPay');
    // Past the window a wallet pays late in (a same-key retry hours later): it did not pay.
    expect(recordedRefusal({ error_code: 'PAYMENT_FAILED', error_message: 'No route', recent: false })).not.toHaveProperty('mayStillPay');
  });
});
