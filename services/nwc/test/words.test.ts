import { describe, expect, it } from 'vitest';
import { checkoutNotPaidWords, firstNotPaidWords, paidWords } from '../src/domain/words.js';

describe('paidWords: what a paid first payment made of the subscription', () => {
  const paid = 'Your wallet paid 1,500 sats';
  it('says active, waiting or pending confirmation as it is', () => {
    expect(paidWords(paid, 'the subscription', { status: 'active' })).toBe('Your wallet paid 1,500 sats: the subscription is active.');
    expect(paidWords(paid, 'the subscription', undefined)).toBe('Your wallet paid 1,500 sats: the subscription becomes active in a moment.');
    expect(paidWords(paid, 'your subscription to Gold', 'unconfirmed')).toBe(
      'Your wallet paid 1,500 sats: your subscription to Gold becomes active once the payment is confirmed.',
    );
  });
  it('cancelled meanwhile: access until the end when it has some, a refund to ask for when not', () => {
    expect(paidWords(paid, 'the subscription', { status: 'cancelled', access_until: Date.UTC(2026, 11, 24, 10, 30) / 1000 })).toBe(
      'Your wallet paid 1,500 sats: the subscription was cancelled meanwhile; it gives access until 2026-12-24 10:30 UTC, and nothing more is charged.',
    );
    expect(paidWords(paid, 'the subscription', { status: 'cancelled', access_until: null })).toBe(
      'Your wallet paid 1,500 sats, but the subscription was cancelled meanwhile: please ask the seller for a refund.',
    );
    expect(paidWords(paid, 'the subscription', { status: 'expired' })).toBe(
      'Your wallet paid 1,500 sats, but the subscription was expired meanwhile: please ask the seller for a refund.',
    );
  });
  it('paused by the seller meanwhile: said as it is, no refund', () => {
    expect(paidWords(paid, 'the subscription', { status: 'paused' })).toBe('Your wallet paid 1,500 sats: the subscription was paused meanwhile by the seller.');
  });
});

describe('firstNotPaidWords: the first payment not paid by the wallet connected in the portal', () => {
  it('a refusal advises the invoice or another wallet, in the wallet words as a clause', () => {
    expect(firstNotPaidWords({ message: 'Insufficient balance.' }, '1,500 sats')).toBe(
      'Your wallet did not pay the first payment: Insufficient balance. Pay it from the invoice on the subscription, or connect another wallet.',
    );
  });
  it('never advises paying the invoice while something else may still pay it (found in review)', () => {
    for (const outcome of [
      { message: 'x', undecided: true as const },
      { message: 'x', earlier: 'waiting' as const },
      { message: 'x', earlier: 'confirmed' as const },
    ]) {
      const words = firstNotPaidWords(outcome, '1,500 sats');
      expect(words).not.toContain('Pay it from the invoice');
      expect(words).toContain('before you pay the invoice');
    }
    expect(firstNotPaidWords({ message: 'x', earlier: 'waiting' }, '1,500 sats')).toBe(
      'Your wallet was not asked to make the first payment: an earlier invoice of this subscription was paid, and its payment is waiting to be confirmed. Reload the page in a minute to see whether the subscription is active, before you pay the invoice.',
    );
  });
  it('not asked for lack of time: said so', () => {
    expect(firstNotPaidWords({ message: 'x', notAsked: true }, '1,500 sats')).toBe(
      'Your wallet was not asked to make the first payment: there was no time left to wait for its answer. Pay it from the invoice on the subscription.',
    );
  });
});

describe('a wallet that did not answer in time is not said to have refused (found from outside)', () => {
  it('the checkout and the portal connect say it may still pay, and advise waiting before paying another way', () => {
    const late = { message: 'The wallet did not answer the payment request within 30 seconds', mayStillPay: true as const };
    expect(checkoutNotPaidWords(late)).toBe(
      'Your wallet has not paid the first invoice yet: The wallet did not answer the payment request within 30 seconds. It may still pay it in the next few minutes: look at the subscription again then, before you pay another way.',
    );
    expect(firstNotPaidWords(late, '1,500 sats')).toBe(
      'Your wallet has not paid the first payment yet: The wallet did not answer the payment request within 30 seconds. It may still pay it in the next few minutes: look at the subscription again then, before you pay the invoice.',
    );
    expect(checkoutNotPaidWords({ message: 'Empty' })).toBe('Your wallet did not pay the first invoice: Empty');
  });
});
