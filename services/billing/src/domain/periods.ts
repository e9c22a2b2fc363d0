import type { Interval } from '@sb/contracts';

const DAY = 86_400;

/** Renewal payments are created this long before the period ends. */
export const RENEWAL_LEAD_SECONDS: Record<Interval, number> = { weekly: 1 * DAY, monthly: 3 * DAY, yearly: 7 * DAY };
/** The last reminder goes out this long before the period ends, while still unpaid. */
export const REMINDER_BEFORE_END_SECONDS = DAY;
/** A paid plan's first payment must arrive within this time, else the subscription expires. */
export const PENDING_EXPIRY_SECONDS = DAY;
export const DAY_SECONDS = DAY;
/**
 * The latest time a period may end: 9999-12-31 23:59:59 UTC. Past it a date has no four-digit year (the
 * pages and notices write dates, and past year 275760 JavaScript cannot write them at all).
 */
export const LATEST_TIME = 253_402_300_799;

/** When the grace period after a period's end runs out (access ends there unless a payment renews it). */
export const graceEnd = (s: { current_period_end: number; grace_period_days: number }) => s.current_period_end + s.grace_period_days * DAY;

function daysInMonth(year: number, month0: number): number {
  return new Date(Date.UTC(year, month0 + 1, 0)).getUTCDate();
}

/**
 * The end of the `n`-th period counted from `anchor` (Unix seconds, UTC). Months keep the anchor's day,
 * clamped to the month's last day, always computed from the anchor so 31 Jan -> 28/29 Feb -> 31 Mar;
 * years keep the date (29 Feb -> 28 Feb in other years). Time of day is kept.
 */
export function periodEnd(anchor: number, n: number, interval: Interval): number {
  if (interval === 'weekly') return anchor + n * 7 * DAY;
  const a = new Date(anchor * 1000);
  const months = interval === 'monthly' ? n : 12 * n;
  const total = a.getUTCMonth() + months;
  const year = a.getUTCFullYear() + Math.floor(total / 12);
  const month0 = ((total % 12) + 12) % 12;
  const day = Math.min(a.getUTCDate(), daysInMonth(year, month0));
  return Math.floor(Date.UTC(year, month0, day, a.getUTCHours(), a.getUTCMinutes(), a.getUTCSeconds()) / 1000);
}
