/**
 * How the pages follow a payment's status: when to ask again and when to stop. Kept apart from the DOM
 * so that its limits (the minutes a payment being applied is waited for) are tested without a browser
 * and without waiting them out.
 */

export interface PaymentStatus {
  status: string;
  plan_id?: string;
  unapplied?: boolean;
  applied?: boolean;
  purpose?: string;
  /** Withdrawn because this payment started its subscription instead (a late one of an earlier checkout). */
  replaced_by?: string;
}

/** How often an open payment is asked about. */
export const POLL_MS = 2000;
/** How often a payment that ran out or failed is asked about again (a late payment still counts). */
export const LATE_POLL_MS = 10_000;
/** For how long after it ended: a checkout is open for a day at most. */
export const LATE_FOLLOW_MS = 24 * 3600_000;
/** After its first hour, an ended payment is asked about once a minute: a payment that late is rare. */
export const LATER_POLL_MS = 60_000;
/** When to ask again about a payment that ended at `endedAt` (ms). */
export const latePace = (endedAt: number, now: number) => (now - endedAt < 3600_000 ? LATE_POLL_MS : LATER_POLL_MS);
/**
 * Paid, and the service has not yet said whether it started the subscription with it (the moments after
 * a payment): not said active yet, since one that came too late is a refund case (found in review: said
 * active, then not applied). Asked every POLL_MS for APPLYING_MS, then every LATE_POLL_MS (billing may be
 * away); a payments service older than `applied` never says, and its payment is said active after
 * APPLYING_MS, as it was before.
 */
export const APPLYING_MS = 60_000;
/** The most a payment billing has not decided on yet is followed: then the page says so and stops. */
export const DECIDING_MAX_MS = 5 * 60_000;

export const applying = (s: PaymentStatus) => s.status === 'paid' && !s.applied && !s.unapplied;

/**
 * After an answer: ask again in `askIn` ms, or `askIn: null` when there is nothing more to ask (the answer
 * is said as it is). `paidSeen`: when the payment was first seen paid and not yet applied, carried by the
 * caller from one answer to the next.
 */
export function nextAsk(s: PaymentStatus, paidSeen: number | null, now: number): { paidSeen: number | null; askIn: number | null } {
  const seen = applying(s) ? (paidSeen ?? now) : paidSeen;
  const waited = seen !== null && now - seen >= APPLYING_MS;
  const deciding = s.applied === false && seen !== null && now - seen < DECIDING_MAX_MS;
  const open = s.status === 'pending' || (applying(s) && (deciding || (s.applied === undefined && !waited)));
  return { paidSeen: seen, askIn: open ? (waited ? LATE_POLL_MS : POLL_MS) : null };
}
