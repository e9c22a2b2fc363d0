import { utcMinute } from '@sb/contracts';

/** A subscription's status as billing holds it after a paid first payment (see settledStatus). */
export type Settled = { status: string; access_until?: number | null | undefined };

/**
 * What a paid first payment made of the subscription, in the subscriber's words, for the NWC checkout and
 * the portal's connect alike (found in review: two copies). `paid`: who paid what ("Your wallet paid 1,500
 * sats"); `subject`: the subscription as the sentence names it. `settled`: 'unconfirmed' while the payments
 * service has not taken the preimage; undefined while billing has not applied it.
 */
export function paidWords(paid: string, subject: string, settled: Settled | 'unconfirmed' | undefined): string {
  if (settled === 'unconfirmed') return `${paid}: ${subject} becomes active once the payment is confirmed.`;
  if (!settled) return `${paid}: ${subject} becomes active in a moment.`;
  const { status, access_until } = settled;
  if (status === 'active') return `${paid}: ${subject} is active.`;
  // Paid and applied, then cancelled to the period's end (a plan archive, say): still theirs until then.
  if (status === 'cancelled' && access_until)
    return `${paid}: ${subject} was cancelled meanwhile; it gives access until ${utcMinute(access_until)}, and nothing more is charged.`;
  // Ended in the same seconds (the owner cancelled it, the plan was archived): the wallet did pay.
  if (status === 'cancelled' || status === 'expired') return `${paid}, but ${subject} was ${status} meanwhile: please ask the seller for a refund.`;
  // Paused by the owner in the same seconds (not ended; a resume charges again): said as it is.
  return `${paid}: ${subject} was ${status} meanwhile by the seller.`;
}

/** A wallet's words as a clause of ours (they may end a sentence of their own). */
export const clause = (words: string) => words.replace(/[\s.!?…]+$/, '') || 'no reason given';

/** The portal connect's wallet not asked for the first payment, and why (a clause). */
export const notAskedWords = (why: string) => `Your wallet was not asked to make the first payment: ${why}. Pay it from the invoice on the subscription.`;

/** A charge of a first payment that did not pay, as chargeConnection tells it. */
export type Unpaid = { message: string; notAsked?: true; undecided?: true; earlier?: 'confirmed' | 'waiting'; mayStillPay?: true };

/**
 * The first payment not paid by the wallet connected in the portal, in the subscriber's words. Paying the
 * invoice by hand is advised only where nothing else may still pay it (found in review: after "an earlier
 * payment is waiting to be confirmed", "Pay it from the invoice").
 */
export function firstNotPaidWords(outcome: Unpaid, amount: string): string {
  // Past the time to ask it (after waiting on another attempt, say): the wallet was not asked.
  if (outcome.notAsked) return notAskedWords('there was no time left to wait for its answer');
  // Another wallet may still pay: paying the invoice by hand now could pay twice.
  if (outcome.undecided)
    return `The first payment of ${amount} is still waiting for a wallet's answer: reload the page in a minute to see whether it was paid, before you pay the invoice.`;
  // An invoice of the subscription it replaced was paid, and its payment may start the subscription.
  if (outcome.earlier) {
    const state = outcome.earlier === 'confirmed' ? 'was just confirmed' : 'is waiting to be confirmed';
    return `Your wallet was not asked to make the first payment: an earlier invoice of this subscription was paid, and its payment ${state}. Reload the page in a minute to see whether the subscription is active, before you pay the invoice.`;
  }
  if (outcome.mayStillPay) return `Your wallet has not paid the first payment yet: ${clause(outcome.message)}. ${MAY_STILL_PAY}, before you pay the invoice.`;
  return `Your wallet did not pay the first payment: ${clause(outcome.message)}. Pay it from the invoice on the subscription, or connect another wallet.`;
}

/**
 * After no answer in time (or an error after which a wallet may still pay): the wallet may pay in the
 * minutes after, and its payment is found then (found from outside: "did not pay", then active).
 */
export const MAY_STILL_PAY = 'It may still pay it in the next few minutes: look at the subscription again then';

/** The NWC checkout's first payment not paid by its wallet, in the subscriber's words. */
export function checkoutNotPaidWords(outcome: Pick<Unpaid, 'message' | 'mayStillPay'>): string {
  if (outcome.mayStillPay) return `Your wallet has not paid the first invoice yet: ${clause(outcome.message)}. ${MAY_STILL_PAY}, before you pay another way.`;
  return `Your wallet did not pay the first invoice: ${outcome.message}`;
}
