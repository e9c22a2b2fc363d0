import { messages, routes, type NWCErrorCode } from '@sb/contracts';
import { busWaitMs, callMessage, DomainError, enqueueEvent, newId, type Queryable, unavailable, unixSeconds, within } from '@sb/runtime';
import { MAX_CONSECUTIVE_FAILURES, SCHEMA, type Deps } from './deps.js';
import { chargeFailedData, chargeRefusal, clipMessage, mayStillPay, nextLook, sharedOutcome, WRONG_PREIMAGE, walletDisabledData } from './domain/charge.js';
import type { AttemptRow } from './store/attempts.repo.js';
import type { ConnectionRow } from './store/connections.repo.js';

/**
 * `confirmed` false: the wallet paid (it answered the preimage) but the payments service could not be
 * told yet; the sweeper and the next charge of the payment tell it. `payer`: the pubkey of the wallet that
 * paid (another one than this connection's when an attempt in flight, of a wallet connected before, paid).
 * `undecided`: not paid yet, another attempt still waits for its wallet's answer (it may pay).
 */
type ChargeOutcome =
  | { paid: true; confirmed: boolean; payer: string }
  | {
      paid: false;
      error_code: NWCErrorCode;
      message: string;
      deactivated: boolean;
      undecided?: true;
      notAsked?: true;
      /** Not asked: another payment of the subscription the wallet paid was just confirmed, or waits to be. */
      earlier?: 'confirmed' | 'waiting';
      /** No answer in time, or one after which the wallet may still pay (mayPayLater): not a refusal. */
      mayStillPay?: true;
    };

/** A payment as a charge needs it. */
interface ChargedPayment {
  id: string;
  payment_request: string;
  amount_sats: number;
  purpose: 'checkout' | 'renewal';
  /** The checkout request's Idempotency-Key (hashed by the gateway): its run again answers this run's refusal. */
  request_key?: string;
}

/** What a charge answers before its caller stops waiting, so that the answer still reaches it. */
const ANSWER_MARGIN_MS = 2_000;

/**
 * Until when (wall-clock ms) a charge may answer a bus caller: by the time the caller said it waits to
 * (`callerAnswerBy`), else the wait it would have with this service's BUS_TIMEOUT_MS and the message's or
 * route's own wait (`routeWaitMs`; a caller of an earlier version says nothing). Past it already (the
 * message waited in a queue while this service hung), nothing is started: the caller was told to retry,
 * and a wallet paying now would charge a checkout its subscriber believes failed (found from outside).
 */
export function answerBy(d: Pick<Deps, 'busTimeoutMs'>, routeWaitMs: number | undefined, callerAnswerBy?: number): number {
  const by = (callerAnswerBy ?? Date.now() + busWaitMs(d.busTimeoutMs, routeWaitMs)) - ANSWER_MARGIN_MS;
  if (Date.now() >= by) throw unavailable('The caller stopped waiting before this charge could start');
  return by;
}

/** How long the gateway waits for one of this service's routes that waits longer than BUS_TIMEOUT_MS. */
export function routeWaitMs(id: (typeof routes)[number]['id']): number | undefined {
  const route = routes.find((r) => r.id === id);
  return route && 'busTimeoutMs' in route ? route.busTimeoutMs : undefined;
}

/**
 * Pays one invoice of a subscription with its connected wallet. Charges of the same payment at once (a
 * checkout sent six times, a renewal and a retried one, on any replica) share one pay_invoice request:
 * one claims the payment (nwc.charge_attempts), the others wait for its outcome until `answerByMs` (then
 * they answer OTHER, as for a wallet that did not answer). A payment an attempt paid is never asked of a
 * wallet again. See runAttempt. `startByMs`: after it the wallet is not asked (`notAsked`): its answer
 * would come after the caller stopped waiting (default: `answerByMs`).
 */
export async function chargeConnection(
  d: Deps,
  conn: ConnectionRow,
  payment: ChargedPayment,
  answerByMs: number,
  startByMs = answerByMs,
): Promise<ChargeOutcome> {
  for (;;) {
    const id = newId('nwa_', d.clock.nowMs());
    const claim = await d.attempts.claim(
      d.db,
      {
        id,
        payment_id: payment.id,
        connection_id: conn.id,
        wallet_pubkey: conn.wallet_pubkey,
        amount_sats: payment.amount_sats,
        purpose: payment.purpose,
        request_key: payment.request_key ?? null,
      },
      d.attemptLeaseMs,
    );
    if (claim.mine) {
      // Past the caller's deadline (the work before it was slow, or another pass of this loop after a
      // refused preimage or a long wait): the wallet is not asked for a charge whose caller has given up.
      if (Date.now() >= startByMs) {
        await d.attempts.finish(d.db, id, 'abandoned');
        return { ...(await unpaid(d, conn, { code: 'OTHER', message: 'The charge could not be made before its caller stopped waiting' })), notAsked: true };
      }
      const earlier = await earlierPaymentWaiting(d, conn, payment);
      if (earlier) {
        await d.attempts.finish(d.db, id, 'abandoned');
        const message =
          earlier === 'confirmed'
            ? 'An earlier payment by this wallet was just confirmed; the charge is made again later if still due'
            : 'An earlier payment by this wallet is waiting to be confirmed; the charge is made again later';
        return { ...(await unpaid(d, conn, { code: 'OTHER', message })), earlier };
      }
      return runAttempt(d, conn, payment, id);
    }
    let paidBy: AttemptRow;
    if ('paid' in claim) paidBy = claim.paid;
    else {
      if (!claim.current) continue;
      const ended = await endOf(d, claim.current.id, answerByMs);
      if (ended === 'caller gone') {
        d.log.warn({ connection_id: conn.id, payment_id: payment.id, attempt_id: claim.current.id }, 'nwc charge stopped waiting for an attempt in flight');
        return {
          ...(await unpaid(d, conn, { code: 'OTHER', message: 'Another charge of this invoice is still waiting for the wallet to answer' })),
          undecided: true,
        };
      }
      const shared = ended && sharedOutcome(ended, conn.wallet_pubkey);
      if (!shared) continue;
      d.log.info({ connection_id: conn.id, payment_id: payment.id, attempt_id: claim.current.id, paid: shared.paid }, 'nwc charge shared an attempt in flight');
      if (!shared.paid) return unpaid(d, conn, shared);
      paidBy = ended;
    }
    const paid = await settled(d, paidBy);
    if (paid) return paid;
    // Its preimage was refused: counted as a failure of its connection, which may have been this one's
    // last allowed (deactivated, secret wiped): that wallet is not asked again.
    const fresh = await d.connections.get(d.db, conn.id);
    if (!fresh?.is_active) return unpaid(d, conn, { code: 'OTHER', message: WRONG_PREIMAGE });
    conn = fresh;
  }
}

/**
 * The wallet paid another payment of this subscription whose preimage the payments service has not
 * taken yet (it was away): given to it first. Confirmed, or still not taken, this charge does not ask
 * the wallet: the payment it makes may be the replacement of that one (billing replaced an invoice the
 * payments service expired meanwhile), and paying it would charge the subscriber twice for one period.
 * Billing charges again on its schedule, by when the first payment has renewed the subscription (or was
 * refused, and the wallet is asked then). Which, or undefined to go on.
 */
async function earlierPaymentWaiting(d: Deps, conn: ConnectionRow, payment: ChargedPayment): Promise<'confirmed' | 'waiting' | undefined> {
  const earlier = await d.attempts.unconfirmedOfSubscription(d.db, conn.subscription_id, payment.id);
  if (!earlier) return undefined;
  const result = await confirmAttempt(d, earlier);
  d.log.info({ connection_id: conn.id, payment_id: payment.id, earlier_payment_id: earlier.payment_id, result }, 'nwc charge waits for an earlier payment');
  if (result === 'refuted') return undefined;
  return result === 'confirmed' ? 'confirmed' : 'waiting';
}

/** Not paid, with whether the subscription still has an active wallet (for billing: invoices from now on if not). */
async function unpaid(d: Deps, conn: ConnectionRow, error: { code: NWCErrorCode; message: string }): Promise<Extract<ChargeOutcome, { paid: false }>> {
  return { paid: false, error_code: error.code, message: error.message, deactivated: await walletGone(d, conn) };
}

/**
 * No active connection pays for the subscription any more (this one deactivated or disconnected). A
 * connection retired by a wallet connected meanwhile is not that: the new wallet pays from now on.
 */
async function walletGone(d: Deps, conn: Pick<ConnectionRow, 'wallet_id' | 'subscription_id'>): Promise<boolean> {
  return !(await d.connections.activeForSubscription(d.db, conn.wallet_id, conn.subscription_id));
}

/**
 * The attempt once it ended (undefined: its lease ran out first, so the payment may be claimed again;
 * 'caller gone': `answerByMs` came first). Looks after 200 ms, then less and less often (up to 2 s).
 */
async function endOf(d: Deps, attemptId: string, answerByMs: number): Promise<AttemptRow | undefined | 'caller gone'> {
  let pause: number | undefined;
  for (;;) {
    const a = await d.attempts.get(d.db, attemptId);
    if (!a || a.outcome !== null) return a;
    if (a.lapsed) return undefined;
    const next = nextLook(pause, Date.now(), answerByMs);
    if (next === null) return 'caller gone';
    pause = next;
    await new Promise((r) => setTimeout(r, next));
  }
}

/**
 * A paid attempt of the payment: paid for this charge too, its preimage confirmed now if the payments
 * service has not taken it yet. Undefined: the payments service refused that preimage, nothing was paid.
 */
async function settled(d: Deps, attempt: AttemptRow): Promise<ChargeOutcome | undefined> {
  if (!attempt.unconfirmed_preimage) return { paid: true, confirmed: true, payer: attempt.wallet_pubkey };
  const result = await confirmAttempt(d, attempt);
  return result === 'refuted' ? undefined : { paid: true, confirmed: result === 'confirmed', payer: attempt.wallet_pubkey };
}

/**
 * Gives the payments service the preimage a paid attempt could not confirm when the wallet answered (the
 * sweeper and the next charge of the payment call it). A refused preimage ends the attempt failed (the
 * wallet did not pay): counted on its connection and announced as `payment.failed`, once, as if the
 * wallet had answered so at once. An unreachable payments service leaves it for the next try.
 */
export async function confirmAttempt(
  d: Deps,
  attempt: Pick<AttemptRow, 'id' | 'payment_id' | 'connection_id' | 'unconfirmed_preimage' | 'amount_sats' | 'purpose'>,
): Promise<'confirmed' | 'refuted' | 'unavailable'> {
  const log = { attempt_id: attempt.id, payment_id: attempt.payment_id };
  const result = await confirmPreimage(d, attempt.payment_id, attempt.unconfirmed_preimage!);
  if (result === 'unavailable') return result;
  if (result === 'wrong') {
    const error = { code: 'OTHER' as const, message: WRONG_PREIMAGE };
    const after = await d.db.tx(async (tx) => {
      if (!(await d.attempts.refuted(tx, attempt.id, error))) return undefined;
      // Attempts of an earlier version do not say what they charged: ended, not announced.
      if (attempt.amount_sats === null || attempt.purpose === null) return undefined;
      const payment = { id: attempt.payment_id, amount_sats: attempt.amount_sats, purpose: attempt.purpose };
      return countFailure(d, tx, attempt.connection_id, payment, { id: attempt.id, walletAsked: true }, error);
    });
    d.log.error({ ...log, consecutive_failures: after?.consecutive_failures }, 'the payments service refused the preimage of a paid nwc attempt');
    // The sweeper's finding reaches billing only so; a charge that found it also answers it (deactivated).
    if (after?.deactivated) await tellBilling(d, after);
    return 'refuted';
  }
  await d.attempts.confirmed(d.db, attempt.id);
  d.log.info(log, 'nwc preimage confirmed');
  return 'confirmed';
}

/**
 * A failed charge, in the caller's transaction: counted on the connection, `payment.failed` to the owner,
 * and the last allowed failure deactivates the connection, wipes its secret and announces
 * `nwc.wallet_disabled`. The connection after it (undefined: it vanished).
 */
async function countFailure(
  d: Deps,
  tx: Queryable,
  connectionId: string,
  payment: { id: string; amount_sats: number; purpose: 'checkout' | 'renewal' },
  attempt: { id: string; walletAsked: boolean },
  error: { code: NWCErrorCode; message: string },
) {
  const row = await d.connections.recordFailure(tx, connectionId, error.code, error.message, unixSeconds(d.clock), MAX_CONSECUTIVE_FAILURES);
  if (!row) return undefined;
  await enqueueEvent(tx, SCHEMA, d.clock, row.wallet_id, 'payment.failed', chargeFailedData(row, payment, attempt, error));
  if (row.deactivated) await enqueueEvent(tx, SCHEMA, d.clock, row.wallet_id, 'nwc.wallet_disabled', walletDisabledData(row, error));
  return row;
}

/**
 * One pay_invoice request. A preimage is a payment: the wallet is never asked for this payment again,
 * and the preimage goes to the payments service (which checks it against the payment hash; billing
 * applies it from the payment.received event, once); when that service cannot be reached the attempt is
 * paid all the same, its preimage kept for the sweeper. After an answer after which the wallet may still
 * pay (or none), an invoice that is paid counts as paid. Otherwise, in one transaction and once per attempt, the failure is counted
 * (countFailure).
 */
async function runAttempt(d: Deps, conn: ConnectionRow, payment: ChargedPayment, attemptId: string): Promise<ChargeOutcome> {
  let answer: WalletAnswer;
  try {
    answer = await askWallet(d, conn, payment);
  } catch (err) {
    // No request went out: the next charge of the payment may ask the wallet at once.
    await d.attempts.finish(d.db, attemptId, 'abandoned').catch(() => undefined);
    throw err;
  }
  const now = unixSeconds(d.clock);
  let unconfirmed: string | undefined;
  if ('preimage' in answer) {
    const confirmed = await confirmPreimage(d, payment.id, answer.preimage);
    if (confirmed === 'wrong') answer = { error: { code: 'OTHER', message: WRONG_PREIMAGE }, walletAsked: true };
    else if (confirmed === 'unavailable') unconfirmed = answer.preimage;
  }
  // A wallet that answered a preimage of another invoice did not pay this one: final, as a refusal is.
  const mayPay = 'error' in answer && answer.walletAsked && mayStillPay(answer.error);
  if ('preimage' in answer || (mayPay && (await paidMeanwhile(d, conn, payment.id)) === 'paid')) {
    await d.db.tx(async (tx) => {
      await d.attempts.finish(tx, attemptId, 'paid', { unconfirmedPreimage: unconfirmed });
      await d.connections.recordSuccess(tx, conn.id, now);
    });
    d.log.info({ connection_id: conn.id, payment_id: payment.id, confirmed: !unconfirmed }, 'nwc payment paid');
    return { paid: true, confirmed: !unconfirmed, payer: conn.wallet_pubkey };
  }
  const error = { code: answer.error.code, message: clipMessage(answer.error.message) };
  const walletAsked = answer.walletAsked;
  const after = await d.db.tx(async (tx) => {
    if (!(await d.attempts.finish(tx, attemptId, 'failed', { error }))) return undefined;
    return countFailure(d, tx, conn.id, payment, { id: attemptId, walletAsked }, error);
  });
  // For billing, a subscription without an active wallet (deactivated now or before) means invoices from now on.
  const deactivated = !!after && !after.is_active && (await walletGone(d, conn));
  d.log.warn(
    { connection_id: conn.id, payment_id: payment.id, error_code: error.code, consecutive_failures: after?.consecutive_failures, deactivated },
    'nwc payment failed',
  );
  return { paid: false, error_code: error.code, message: error.message, deactivated, ...(mayPay ? { mayStillPay: true as const } : {}) };
}

/**
 * Billing switches the subscription to invoices (the normal lead time and reminders apply from then on).
 * Best effort: if billing cannot be reached, its period-end charge finds no active connection and
 * switches then.
 */
export async function tellBilling(d: Deps, conn: Pick<ConnectionRow, 'wallet_id' | 'subscription_id' | 'id'>): Promise<void> {
  await callMessage(d.bus, messages.nwcFallback, { wallet_id: conn.wallet_id, subscription_id: conn.subscription_id }).catch((err) =>
    d.log.warn({ err, connection_id: conn.id }, 'could not tell billing that the wallet is gone; it will notice at period end'),
  );
}

/**
 * The wallet answered an error after which it may still pay (mayPayLater), or we stopped waiting (no
 * answer in time, a relay dropped): the provider confirmed the payment. That is a success, not a failure
 * that could deactivate a working wallet. 'unavailable': the payments service did not answer within
 * `timeoutMs` (or at all).
 */
async function paidMeanwhile(
  d: Deps,
  conn: Pick<ConnectionRow, 'wallet_id' | 'subscription_id'>,
  paymentId: string,
  timeoutMs?: number,
): Promise<'paid' | 'unpaid' | 'unavailable'> {
  const asked = callMessage(d.bus, messages.getPayment, { wallet_id: conn.wallet_id, id: paymentId }).then(
    (found) => (found.payment?.status === 'paid' && found.payment.subscription_id === conn.subscription_id ? 'paid' : 'unpaid'),
    () => 'unavailable' as const,
  );
  return timeoutMs === undefined ? asked : within(asked, timeoutMs, () => 'unavailable' as const);
}

/**
 * A failed attempt whose wallet may have paid late, its invoice paid since: no failure after all. Its
 * attempt becomes paid and its connection's count forgets it (the sweeper looks for a while). Each look
 * is recorded (the next one waits longer); 'unavailable': the payments service did not answer within
 * `timeoutMs`, nothing recorded.
 */
export async function forgiveIfPaidLate(
  d: Deps,
  attempt: Pick<AttemptRow, 'id' | 'payment_id'> & { wallet_id: string; subscription_id: string },
  timeoutMs: number,
): Promise<'forgiven' | 'unpaid' | 'unavailable'> {
  const found = await paidMeanwhile(d, attempt, attempt.payment_id, timeoutMs);
  if (found === 'unavailable') return found;
  if (found === 'unpaid') {
    await d.attempts.lookedAtLate(d.db, attempt.id);
    return found;
  }
  if (await d.db.tx((tx) => d.attempts.paidLate(tx, attempt.id))) {
    d.log.info({ attempt_id: attempt.id, payment_id: attempt.payment_id }, 'nwc payment paid after its charge failed: the failure no longer counts');
  }
  return 'forgiven';
}

/** The preimage given to the payments service: taken, refused (not this invoice's), or not known yet (it is away). */
async function confirmPreimage(d: Deps, paymentId: string, preimage: string): Promise<'confirmed' | 'wrong' | 'unavailable'> {
  try {
    await callMessage(d.bus, messages.confirmPreimage, { payment_id: paymentId, preimage });
    return 'confirmed';
  } catch (err) {
    if (err instanceof DomainError && (err.kind === 'invalid' || err.kind === 'not_found')) return 'wrong';
    d.log.warn({ payment_id: paymentId, err: (err as Error).message }, 'nwc preimage not confirmed: the payments service is away; tried again later');
    return 'unavailable';
  }
}

/** The wallet's answer; `walletAsked` false for a refusal decided here, without a request. */
type WalletAnswer = { preimage: string } | { error: { code: NWCErrorCode; message: string }; walletAsked: boolean };

async function askWallet(d: Deps, conn: ConnectionRow, payment: ChargedPayment): Promise<WalletAnswer> {
  // A connection without its secret is one that was deactivated (the secret is wiped with it).
  const refused = chargeRefusal({ ...conn, is_active: conn.is_active && !!conn.secret_sealed }, payment.amount_sats);
  if (refused || !conn.secret_sealed) {
    return { error: refused ?? { code: 'UNAUTHORIZED', message: 'The wallet connection is no longer active' }, walletAsked: false };
  }
  const result = await d.nip47.payInvoice(
    { pubkey: conn.wallet_pubkey, relays: conn.relays, secret: d.secrets.open(conn.secret_sealed), encryption: conn.encryption },
    payment.payment_request,
  );
  // A request that reached no relay is one the wallet never had (found from outside: reported as asked,
  // and as one it might still pay, with the subscription held a charge window for it).
  return 'error' in result ? { error: result.error, walletAsked: !result.unsent } : result;
}
