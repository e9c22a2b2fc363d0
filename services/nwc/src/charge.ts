import { messages, type NWCErrorCode } from '@sb/contracts';
import { callMessage, DomainError, enqueueEvent, unixSeconds } from '@sb/runtime';
import { MAX_CONSECUTIVE_FAILURES, SCHEMA, type Deps } from './deps.js';
import { chargeRefusal } from './domain/charge.js';
import type { ConnectionRow } from './store/connections.repo.js';

type ChargeOutcome = { paid: true } | { paid: false; error_code: NWCErrorCode; message: string; deactivated: boolean };

/**
 * Pays one invoice of a subscription with its connected wallet. A preimage confirms the payment in the
 * payments service (which checks it against the payment hash; billing applies it from the
 * payment.received event, once). Any failure is recorded on the connection; the last allowed one
 * deactivates it, wipes its secret and announces `nwc.wallet_disabled` in the same transaction.
 */
export async function chargeConnection(
  d: Deps,
  conn: ConnectionRow,
  payment: { id: string; payment_request: string; amount_sats: number },
): Promise<ChargeOutcome> {
  const attempt = await payWith(d, conn, payment);
  const now = unixSeconds(d.clock);
  if ('preimage' in attempt || (attempt.error.code === 'OTHER' && (await paidMeanwhile(d, conn, payment.id)))) {
    await d.connections.recordSuccess(d.db, conn.id, now);
    d.log.info({ connection_id: conn.id, payment_id: payment.id }, 'nwc payment paid');
    return { paid: true };
  }
  const { code, message } = attempt.error;
  const after = await d.db.tx(async (tx) => {
    const row = await d.connections.recordFailure(tx, conn.id, code, message, now, MAX_CONSECUTIVE_FAILURES);
    if (row && !row.is_active && conn.is_active) {
      await enqueueEvent(tx, SCHEMA, d.clock, row.wallet_id, 'nwc.wallet_disabled', {
        subscription_id: row.subscription_id,
        plan_id: row.plan_id,
        plan_name: row.plan_name,
        status: 'disabled',
        connection_id: row.id,
        subscriber_id: row.subscriber_id,
        wallet_pubkey: row.wallet_pubkey.slice(0, 8),
        error_code: code,
        last_error: message,
        consecutive_failures: row.consecutive_failures,
        ...(row.subscriber_email ? { subscriber_email: row.subscriber_email } : {}),
        ...(row.subscriber_name ? { subscriber_name: row.subscriber_name } : {}),
        notify_subscriber: true,
      });
    }
    return row;
  });
  const deactivated = !!after && !after.is_active;
  d.log.warn(
    { connection_id: conn.id, payment_id: payment.id, error_code: code, consecutive_failures: after?.consecutive_failures, deactivated },
    'nwc payment failed',
  );
  return { paid: false, error_code: code, message, deactivated };
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
 * We stopped waiting (no answer in time, a relay dropped) but the wallet may have paid anyway: the
 * provider confirmed the payment. That is a success, not a failure that could deactivate a working wallet.
 */
async function paidMeanwhile(d: Deps, conn: ConnectionRow, paymentId: string): Promise<boolean> {
  const found = await callMessage(d.bus, messages.getPayment, { wallet_id: conn.wallet_id, id: paymentId }).catch(() => undefined);
  return found?.payment?.status === 'paid' && found.payment.subscription_id === conn.subscription_id;
}

/** The wallet's answer, with the preimage already accepted by the payments service. */
async function payWith(d: Deps, conn: ConnectionRow, payment: { id: string; payment_request: string; amount_sats: number }) {
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
