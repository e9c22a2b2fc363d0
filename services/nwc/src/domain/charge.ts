import { type NWCErrorCode, storableText } from '@sb/contracts';

/**
 * Why a connection must not be asked to pay `amount_sats` at all (null: ask the wallet): a deactivated
 * connection, or an amount above the limit the subscriber gave it.
 */
export function chargeRefusal(
  conn: { is_active: boolean; max_amount_sats?: number | null },
  amountSats: number,
): { code: NWCErrorCode; message: string } | null {
  if (!conn.is_active) return { code: 'UNAUTHORIZED', message: 'The wallet connection is no longer active' };
  if (conn.max_amount_sats !== null && conn.max_amount_sats !== undefined && amountSats > conn.max_amount_sats) {
    return { code: 'QUOTA_EXCEEDED', message: `The payment of ${amountSats} sats is above this connection's limit of ${conn.max_amount_sats} sats` };
  }
  return null;
}

/** The longest error message stored or announced (a wallet's own text may be any length). */
export const MAX_ERROR_MESSAGE_CHARS = 500;

/** A wallet's `message` as it is stored and announced (storableText: no NUL or lone surrogate, at most MAX_ERROR_MESSAGE_CHARS). */
export const clipMessage = (message: string): string => storableText(message, MAX_ERROR_MESSAGE_CHARS);

/**
 * The error answers after which the wallet may still pay the same request (a retry inside it, a route
 * found late); a wallet that did not answer in time is answered OTHER here. Any other refusal (no
 * balance, over budget, not allowed, rate limited, refused here without asking) is final at once: the
 * wallet did not pay, whoever else pays the invoice.
 */
const MAY_PAY_LATER: ReadonlySet<NWCErrorCode> = new Set(['INTERNAL', 'OTHER', 'PAYMENT_FAILED']);
export const MAY_PAY_LATER_CODES: readonly NWCErrorCode[] = [...MAY_PAY_LATER];
export const mayPayLater = (code: NWCErrorCode): boolean => MAY_PAY_LATER.has(code);

export const WRONG_PREIMAGE = 'The wallet answered with a preimage that does not belong to the invoice';

/** Whether the wallet that answered `error` may still pay the same request; a preimage of another invoice is final. */
export const mayStillPay = (error: { code: NWCErrorCode; message: string }): boolean => mayPayLater(error.code) && error.message !== WRONG_PREIMAGE;

/**
 * A refusal recorded for the same request (its answer was lost), answered as the charge that got it
 * answered it: a retry of a wallet that may still pay must not say "did not pay" (found in review), while
 * it still may (`recent`: within LATE_PAYMENT_WINDOW_S of that answer; a same-key retry can come hours later).
 */
export function recordedRefusal(row: { error_code: NWCErrorCode | null; error_message: string | null; recent: boolean }): {
  paid: false;
  error_code: NWCErrorCode;
  message: string;
  mayStillPay?: true;
} {
  const error = { code: row.error_code ?? 'OTHER', message: row.error_message ?? 'The wallet did not pay' };
  return { paid: false, error_code: error.code, message: error.message, ...(row.recent && mayStillPay(error) ? { mayStillPay: true as const } : {}) };
}

/** A charge not paid as the bus and the checkout answer it: its error code, and whether the wallet may still pay. */
export const notPaidFields = (outcome: { error_code: NWCErrorCode; mayStillPay?: true }): { error_code: NWCErrorCode; may_still_pay?: true } => ({
  error_code: outcome.error_code,
  ...(outcome.mayStillPay ? { may_still_pay: true as const } : {}),
});

/**
 * How long after a failed charge that may still be paid by its wallet (mayPayLater) its invoice is looked
 * at again. Its request expires (NIP-40) with our wait, so an honest wallet pays within moments. A payment
 * found paid in this time takes the failure back; the payment does not say who paid a BOLT11 invoice (the
 * subscriber may have paid its pay link by hand), which is why a definite refusal is never taken back.
 */
export const LATE_PAYMENT_WINDOW_S = 600;

/** The first and the longest pause of a charge waiting for another attempt of its payment to end. */
const FIRST_LOOK_MS = 200;
const LONGEST_LOOK_MS = 2_000;

/**
 * How long a charge waiting for another attempt sleeps before it looks again: 200 ms, doubling up to 2 s,
 * never past `untilMs` (the caller stops waiting then). Null: the deadline has come.
 */
export function nextLook(previousMs: number | undefined, nowMs: number, untilMs: number): number | null {
  const left = untilMs - nowMs;
  if (left <= 0) return null;
  return Math.min(previousMs === undefined ? FIRST_LOOK_MS : Math.min(previousMs * 2, LONGEST_LOOK_MS), left);
}

/** How an attempt to charge a payment ended, as the charging code and the events see it. */
export type AttemptOutcome = { paid: true } | { paid: false; code: NWCErrorCode; message: string };

/**
 * What a charge that found another attempt of the same payment in flight takes from it once it ended:
 * a paid payment is paid for everyone; a refusal holds for the same wallet (asking it again at once would
 * get the same answer), not for another wallet the subscriber connected meanwhile, nor an attempt
 * abandoned by a replica that stopped. Null: charge with this connection.
 */
export function sharedOutcome(
  ended: { outcome: 'paid' | 'failed' | 'abandoned' | null; wallet_pubkey: string; error_code: NWCErrorCode | null; error_message: string | null },
  walletPubkey: string,
): AttemptOutcome | null {
  if (ended.outcome === 'paid') return { paid: true };
  if (ended.outcome === 'failed' && ended.wallet_pubkey === walletPubkey) {
    return { paid: false, code: ended.error_code ?? 'OTHER', message: ended.error_message ?? 'The wallet did not pay' };
  }
  return null;
}

/** The connection as the events about it need it. */
interface ChargedConnection {
  id: string;
  subscription_id: string;
  plan_id: string;
  plan_name: string;
  subscriber_id: string;
  wallet_pubkey: string;
  consecutive_failures: number;
  subscriber_email: string | null;
  subscriber_name: string | null;
}

const subscriberOf = (c: ChargedConnection) => ({
  ...(c.subscriber_email ? { subscriber_email: c.subscriber_email } : {}),
  ...(c.subscriber_name ? { subscriber_name: c.subscriber_name } : {}),
});

/**
 * `payment.failed` for one failed charge (the payment stays payable): the wallet refused or left it
 * unanswered (`wallet_asked: true`), or the charge was refused here without a request (`wallet_asked:
 * false`: the connection is no longer active, or the amount is above its limit). The owner's event only:
 * the subscriber hears of their wallet when it is deactivated (nwc.wallet_disabled).
 */
export function chargeFailedData(
  after: ChargedConnection & { deactivated: boolean },
  payment: { id: string; amount_sats: number; purpose: 'checkout' | 'renewal' },
  attempt: { id: string; walletAsked: boolean },
  error: { code: NWCErrorCode; message: string },
) {
  return {
    subscription_id: after.subscription_id,
    plan_id: after.plan_id,
    plan_name: after.plan_name,
    ...subscriberOf(after),
    status: 'failed',
    payment_id: payment.id,
    amount_sats: payment.amount_sats,
    payment_method: 'nwc',
    purpose: payment.purpose,
    error_code: error.code,
    error_message: clipMessage(error.message),
    attempt_id: attempt.id,
    wallet_asked: attempt.walletAsked,
    connection_id: after.id,
    consecutive_failures: after.consecutive_failures,
    wallet_disabled: after.deactivated,
    ...(attempt.walletAsked && mayStillPay(error) ? { may_still_pay: true as const } : {}),
    notify_subscriber: false,
  };
}

/** `nwc.wallet_disabled`: the failure that deactivated the connection; the subscriber is told. */
export function walletDisabledData(after: ChargedConnection, error: { code: NWCErrorCode; message: string }) {
  return {
    subscription_id: after.subscription_id,
    plan_id: after.plan_id,
    plan_name: after.plan_name,
    status: 'disabled',
    connection_id: after.id,
    subscriber_id: after.subscriber_id,
    wallet_pubkey: after.wallet_pubkey.slice(0, 8),
    error_code: error.code,
    last_error: clipMessage(error.message),
    consecutive_failures: after.consecutive_failures,
    ...subscriberOf(after),
    notify_subscriber: true,
  };
}
