import { describe, expect, it } from 'vitest';
import { APPLYING_MS, DECIDING_MAX_MS, LATE_POLL_MS, LATER_POLL_MS, latePace, nextAsk, type PaymentStatus, POLL_MS } from '../web/src/pace.js';

/** The answers of one payment, each at its time: what the page does after each (ask again in ms, or stop). */
function follow(answers: [number, PaymentStatus][]): (number | null)[] {
  let paidSeen: number | null = null;
  return answers.map(([at, s]) => {
    const next = nextAsk(s, paidSeen, at);
    paidSeen = next.paidSeen;
    return next.askIn;
  });
}

const T0 = 1_800_000_000_000;

describe('how the pages follow a payment', () => {
  it('asks about an open payment every 2 s, and stops at any end', () => {
    expect(follow([[T0, { status: 'pending' }]])).toEqual([POLL_MS]);
    for (const status of ['expired', 'failed']) expect(follow([[T0, { status }]])).toEqual([null]);
    expect(follow([[T0, { status: 'paid', applied: true }]])).toEqual([null]);
    expect(follow([[T0, { status: 'paid', applied: false, unapplied: true }]])).toEqual([null]);
  });

  it('a paid payment billing has not decided on: every 2 s for a minute, then every 10 s, and no more after 5 minutes', () => {
    const deciding: PaymentStatus = { status: 'paid', applied: false };
    expect(
      follow([
        [T0, { status: 'pending' }],
        [T0 + 2000, deciding],
        [T0 + 2000 + APPLYING_MS - 1, deciding],
        [T0 + 2000 + APPLYING_MS, deciding],
        [T0 + 2000 + DECIDING_MAX_MS - 1, deciding],
        // The cap: said "taking longer than usual" by the page, which asks no more.
        [T0 + 2000 + DECIDING_MAX_MS, deciding],
      ]),
    ).toEqual([POLL_MS, POLL_MS, POLL_MS, LATE_POLL_MS, LATE_POLL_MS, null]);
  });

  it('counts the wait from the first answer that said paid, not from the first ask', () => {
    const deciding: PaymentStatus = { status: 'paid', applied: false };
    // Pending for ten minutes, then paid: the five minutes start then.
    expect(
      follow([
        [T0, { status: 'pending' }],
        [T0 + 10 * 60_000, deciding],
        [T0 + 14 * 60_000, deciding],
        [T0 + 15 * 60_000, deciding],
      ]),
    ).toEqual([POLL_MS, POLL_MS, LATE_POLL_MS, null]);
  });

  it('decided while asked: said at once, applied or too late', () => {
    const deciding: PaymentStatus = { status: 'paid', applied: false };
    expect(
      follow([
        [T0, deciding],
        [T0 + 90_000, { status: 'paid', applied: true }],
      ]),
    ).toEqual([POLL_MS, null]);
    expect(
      follow([
        [T0, deciding],
        [T0 + 2000, { status: 'paid', applied: false, unapplied: true }],
      ]),
    ).toEqual([POLL_MS, null]);
  });

  it('a payments service older than the applied mark: its paid payment is said after a minute', () => {
    const older: PaymentStatus = { status: 'paid' };
    expect(
      follow([
        [T0, older],
        [T0 + APPLYING_MS - 1, older],
        [T0 + APPLYING_MS, older],
      ]),
    ).toEqual([POLL_MS, POLL_MS, null]);
  });

  it('asks about a payment that ended every 10 s for its first hour, then every minute', () => {
    expect(latePace(T0, T0)).toBe(LATE_POLL_MS);
    expect(latePace(T0, T0 + 3600_000 - 1)).toBe(LATE_POLL_MS);
    expect(latePace(T0, T0 + 3600_000)).toBe(LATER_POLL_MS);
  });
});
