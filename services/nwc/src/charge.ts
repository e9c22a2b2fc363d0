import { messages, type NWCErrorCode } from '@sb/contracts';
import { callMessage, DomainError, enqueueEvent, newId, unixSeconds } from '@sb/runtime';
import { MAX_CONSECUTIVE_FAILURES, SCHEMA, type Deps } from './deps.js';
import { chargeFailedData, chargeRefusal, sharedOutcome, walletDisabledData, type AttemptOutcome } from './domain/charge.js';
import type { ConnectionRow } from './store/connections.repo.js';

type ChargeOutcome = { paid: true } | { paid: false; error_code: NWCErrorCode; message: string; deactivated: boolean };

/** A payment as a charge needs it. */
interface ChargedPayment {
  id: string;
  payment_request: string;
  amount_sats: number;
  purpose: 'checkout' | 'renewal';
}

/** How often a charge waiting for another attempt of the same payment looks whether it ended. */
const ATTEMPT_POLL_MS = 200;

/**
 * Pays one invoice of a subscription with its connected wallet. Charges of the same payment at once (a
 * checkout sent six times, a renewal and a retried one, on any replica) share one pay_invoice request:
 * one claims the payment (nwc.charge_attempts), the others wait for its outcome. See runAttempt.
 */
export async function chargeConnection(d: Deps, conn: ConnectionRow, payment: ChargedPayment): Promise<ChargeOutcome> {
  for (;;) {
    const id = newId('nwa_', d.clock.nowMs());
    const claim = await d.attempts.claim(d.db, { id, payment_id: payment.id, connection_id: conn.id, wallet_pubkey: conn.wallet_pubkey }, d.attemptLeaseMs);
    if (claim.mine) return runAttempt(d, conn, payment, id);
    if (!claim.current) continue;
    const ended = await endOf(d, claim.current.id);
    const shared = ended && sharedOutcome(ended, conn.wallet_pubkey);
    if (shared) {
      d.log.info({ connection_id: conn.id, payment_id: payment.id, attempt_id: claim.current.id, paid: shared.paid }, 'nwc charge shared an attempt in flight');
      if (shared.paid) return shared;
      const now = await d.connections.get(d.db, conn.id);
      return { paid: false, error_code: shared.code, message: shared.message, deactivated: !now?.is_active };
    }
  }
}

/** The attempt once it ended (undefined: its lease ran out first, so the payment may be claimed again). */
async function endOf(d: Deps, attemptId: string) {
  for (;;) {
    const a = await d.attempts.get(d.db, attemptId);
    if (!a || a.outcome !== null) return a;
    if (a.lapsed) return undefined;
    await new Promise((r) => setTimeout(r, ATTEMPT_POLL_MS));
  }
}

/**
 * One pay_invoice request. A preimage confirms the payment in the payments service (which checks it
 * against the payment hash; billing applies it from the payment.received event, once). Whatever the
 * wallet answered, an invoice that is paid counts as paid. Otherwise, in one transaction and once per
 * attempt: the failure is counted on the connection, `payment.failed` goes to the owner, and the last
 * allowed failure deactivates the connection, wipes its secret and announces `nwc.wallet_disabled`.
 */
async function runAttempt(d: Deps, conn: ConnectionRow, payment: ChargedPayment, attemptId: string): Promise<ChargeOutcome> {
  let outcome: AttemptOutcome;
  try {
    const attempt = await payWith(d, conn, payment);
    outcome = 'preimage' in attempt || (await paidMeanwhile(d, conn, payment.id)) ? { paid: true } : { paid: false, ...attempt.error };
  } catch (err) {
    // Nothing known of the wallet's answer: the next charge of the payment may ask it again at once.
    await d.attempts.finish(d.db, attemptId, 'abandoned').catch(() => undefined);
    throw err;
  }
  const now = unixSeconds(d.clock);
  if (outcome.paid) {
    await d.db.tx(async (tx) => {
      await d.attempts.finish(tx, attemptId, 'paid');
      await d.connections.recordSuccess(tx, conn.id, now);
    });
    d.log.info({ connection_id: conn.id, payment_id: payment.id }, 'nwc payment paid');
    return { paid: true };
  }
  const error = { code: outcome.code, message: outcome.message };
  const after = await d.db.tx(async (tx) => {
    if (!(await d.attempts.finish(tx, attemptId, 'failed', error))) return undefined;
    const row = await d.connections.recordFailure(tx, conn.id, error.code, error.message, now, MAX_CONSECUTIVE_FAILURES);
    if (!row) return undefined;
    await enqueueEvent(tx, SCHEMA, d.clock, row.wallet_id, 'payment.failed', chargeFailedData(row, payment, attemptId, error));
    if (row.deactivated) await enqueueEvent(tx, SCHEMA, d.clock, row.wallet_id, 'nwc.wallet_disabled', walletDisabledData(row, error));
    return row;
  });
  // For billing, a connection that is no longer active (deactivated now or before) means invoices from now on.
  const deactivated = !!after && !after.is_active;
  d.log.warn(
    { connection_id: conn.id, payment_id: payment.id, error_code: error.code, consecutive_failures: after?.consecutive_failures, deactivated },
    'nwc payment failed',
  );
  return { paid: false, error_code: error.code, message: error.message, deactivated };
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
 * The wallet refused, or we stopped waiting (no answer in time, a relay dropped), but it may have paid
 * anyway: the provider confirmed the payment. That is a success, not a failure that could deactivate a
 * working wallet, whatever error code the wallet answered.
 */
async function paidMeanwhile(d: Deps, conn: ConnectionRow, paymentId: string): Promise<boolean> {
  const found = await callMessage(d.bus, messages.getPayment, { wallet_id: conn.wallet_id, id: paymentId }).catch(() => undefined);
  return found?.payment?.status === 'paid' && found.payment.subscription_id === conn.subscription_id;
}

/** The wallet's answer, with the preimage already accepted by the payments service. */
async function payWith(d: Deps, conn: ConnectionRow, payment: ChargedPayment) {
  const fail = (code: NWCErrorCode, message: string) => ({ error: { code, message } }) as const;
  // A connection without its secret is one that was deactivated (the secret is wiped with it).
  const refused = chargeRefusal({ ...conn, is_active: conn.is_active && !!conn.secret_sealed }, payment.amount_sats);
  if (refused || !conn.secret_sealed) return { error: refused ?? { code: 'UNAUTHORIZED' as const, message: 'The wallet connection is no longer active' } };
  const result = await d.nip47.payInvoice(
    { pubkey: conn.wallet_pubkey, relays: conn.relays, secret: d.secrets.open(conn.secret_sealed), encryption: conn.encryption },
    payment.payment_request,
  );
  if ('error' in result) return result;
  try {
    await callMessage(d.bus, messages.confirmPreimage, { payment_id: payment.id, preimage: result.preimage });
    return result;
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'invalid') return fail('OTHER', 'The wallet answered with a preimage that does not belong to the invoice');
    throw err;
  }
}
