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

/**
 * Where the dunning window (payment_failed, then expired) starts: the end of the grace of the period that
 * lapsed unpaid. An extend of a payment_failed subscription moves its period end (the days count once a
 * period is paid) but not this: left to follow the end, an extend of up to 3650 days kept a subscription
 * without access in dunning, invoiced daily and reminded weekly, for years. A value from before the
 * current period began (left by a version that did not clear it) is not this period's.
 */
export const dunningStart = (s: { current_period_start: number; current_period_end: number; grace_period_days: number; dunning_from: number | null }) =>
  s.dunning_from !== null && s.dunning_from > s.current_period_start ? s.dunning_from : graceEnd(s);

/**
 * How late a step of the schedule may come and still be taken as on time (a sweep runs every minute):
 * later, the scheduler was away (downtime, a clock moved on). The step into payment_failed then counts its
 * dunning window from itself, and a trial's first invoice is not announced as the trial ending.
 */
export const LATE_STEP_S = DAY;

/**
 * Where the dunning window of a subscription stepping into payment_failed at `now` starts: from now when
 * the step comes more than a day after its grace ended (found from outside: after a long outage a
 * subscription went to expired without an invoice ever made, its window over before it began), else as
 * dunningStart says.
 */
export const dunningStartAt = (s: Parameters<typeof dunningStart>[0], now: number) => (now - graceEnd(s) > LATE_STEP_S ? now : dunningStart(s));

function daysInMonth(year: number, month0: number): number {
  return new Date(Date.UTC(year, month0 + 1, 0)).getUTCDate();
}

/** The end of the `n`-th whole period from `anchor`, wherever it falls (see periodEnd). */
function wholePeriodEnd(anchor: number, n: number, interval: Interval): number {
  if (interval === 'weekly') return anchor + n * 7 * DAY;
  const a = new Date(anchor * 1000);
  const months = interval === 'monthly' ? n : 12 * n;
  const total = a.getUTCMonth() + months;
  const year = a.getUTCFullYear() + Math.floor(total / 12);
  const month0 = ((total % 12) + 12) % 12;
  const day = Math.min(a.getUTCDate(), daysInMonth(year, month0));
  return Math.floor(Date.UTC(year, month0, day, a.getUTCHours(), a.getUTCMinutes(), a.getUTCSeconds()) / 1000);
}

/**
 * The end of the `n`-th period counted from `anchor` (Unix seconds, UTC). Months keep the anchor's day,
 * clamped to the month's last day, always computed from the anchor so 31 Jan -> 28/29 Feb -> 31 Mar;
 * years keep the date (29 Feb -> 28 Feb in other years). Time of day is kept. Never after LATEST_TIME:
 * a payment already made for a period that would end later (issued before an extend moved the end to
 * late 9999, or a checkout extended there) still buys one, and it ends at LATEST_TIME.
 */
export function periodEnd(anchor: number, n: number, interval: Interval): number {
  return Math.min(wholePeriodEnd(anchor, n, interval), LATEST_TIME);
}

/** A time moved forward by `seconds`, never past LATEST_TIME (a trial's end, say). */
export const notPastLatest = (t: number, seconds: number) => Math.min(t + seconds, LATEST_TIME);

/**
 * Whether a whole period of `interval` still fits after one ending at `end`. When it does not, the period
 * is the last one: no renewal is sold for the few days left before LATEST_TIME at a whole period's price.
 */
export const hasNextPeriod = (end: number, interval: Interval) => wholePeriodEnd(end, 1, interval) <= LATEST_TIME;
