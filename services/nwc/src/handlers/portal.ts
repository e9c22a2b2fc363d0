import { messages, satsText, toPortalWallet, type BusRequest, type PortalWalletConnected } from '@sb/contracts';
import { BusUnavailableError, callMessage, DomainError, notFound, routeHandler, unixSeconds, unauthenticated, within } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { answerBy, chargeConnection, routeWaitMs, tellBilling } from '../charge.js';
import { clause, firstNotPaidWords, notAskedWords, paidWords } from '../domain/words.js';
import { LATE_PAYMENT_WINDOW_S, recordedRefusal } from '../domain/charge.js';
import { toConnection, type ConnectionRow } from '../store/connections.repo.js';
import { checked, settledStatus, storeConnection, wellFormed } from './public.subscribe.js';

/** The token's subscriber, resolved by billing (which owns subscribers); an unknown token is 401. */
async function subscriberOf(d: Deps, req: BusRequest): Promise<{ subscriber_id: string; wallet_id: string }> {
  const hash = req.caller.subscriber_token_hash;
  if (!hash) throw unauthenticated('Invalid subscriber token');
  try {
    return await callMessage(d.bus, messages.subscriberOfToken, { token_hash: hash });
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'not_found') throw unauthenticated('Invalid subscriber token');
    throw err;
  }
}

/** How long the ask for a first payment's invoice may take (its message's wait). */
const FIRST_INVOICE_WAIT_MS = messages.firstPaymentDue.timeoutMs;

export const listWallets = (d: Deps) =>
  routeHandler('portal.wallets.list', async (req) => {
    const s = await subscriberOf(d, req);
    const page = await d.connections.listOfSubscriber(d.db, s.wallet_id, s.subscriber_id, req.query.limit, req.query.offset);
    return { ...page, items: page.items.map((r) => toPortalWallet(toConnection(r), r)) };
  });

/** Another subscriber's wallet is 404, exactly like an unknown one. Disconnecting twice is fine. */
export const disconnectWallet = (d: Deps) =>
  routeHandler('portal.wallets.disconnect', async (req) => {
    const s = await subscriberOf(d, req);
    const row = await d.connections.disconnect(d.db, s.wallet_id, s.subscriber_id, req.params.id, unixSeconds(d.clock));
    if (!row) throw notFound('Wallet');
    d.log.info({ connection_id: row.id }, 'nwc wallet disconnected');
    await tellBilling(d, row);
    return { success: true, message: 'Wallet disconnected: it pays nothing more; any further renewal is paid by invoice.' };
  });

/**
 * A wallet connected in the portal to one of the subscriber's NWC subscriptions (billing checks which):
 * checked like a checkout's, stored with its secret sealed, replacing the subscription's earlier wallet;
 * it pays the renewals from now on, and a first payment still due at once (billing names it).
 */
export const connectWallet = (d: Deps) =>
  routeHandler('portal.wallets.connect', async (req) => {
    const by = answerBy(d, routeWaitMs('portal.wallets.connect'), req.caller.answer_by);
    const s = await subscriberOf(d, req);
    const body = req.body;
    const target = { wallet_id: s.wallet_id, subscriber_id: s.subscriber_id, subscription_id: body.subscription_id, max_amount_sats: body.max_amount_sats };
    // Bad input is 422 whatever the subscription (found from outside: 409 for one paid by invoice first).
    wellFormed(body.nwc_connection_string);
    // Another subscriber's subscription is refused before any relay the caller named is contacted (by a
    // billing of an earlier version, without the check, after: as it was then).
    await callMessage(d.bus, messages.nwcReconnectCheck, target).catch((err) => {
      if (!(err instanceof BusUnavailableError && err.noResponders)) throw err;
    });
    const { conn, encryption } = await checked(d, body.nwc_connection_string);
    const sub = await callMessage(d.bus, messages.nwcReconnect, target);
    const key = req.caller.idempotency_key;
    // The same request again (its answer lost after the wallet was asked): the connection it made, as it
    // stands (found in review: a new one, its failure count 0 beside the refusal recorded).
    const made = key
      ? await d.connections.activeOfRequest(
          d.db,
          s.wallet_id,
          body.subscription_id,
          { pubkey: conn.pubkey, max_amount_sats: body.max_amount_sats ?? null },
          key,
        )
      : undefined;
    const row =
      made ??
      (await storeConnection(
        d,
        {
          wallet_id: s.wallet_id,
          subscriber_id: s.subscriber_id,
          subscription_id: body.subscription_id,
          plan_id: sub.plan_id,
          plan_name: sub.plan_name,
          max_amount_sats: body.max_amount_sats ?? null,
          subscriber_email: sub.subscriber_email,
          subscriber_name: sub.subscriber_name,
        },
        conn,
        encryption,
      ));
    if (!made) d.log.info({ connection_id: row.id, subscription_id: row.subscription_id, encryption }, 'nwc wallet connected in the portal');
    const first_payment = sub.first_payment_due ? await payFirst(d, row, target, by, key) : undefined;
    if (!first_payment) return toPortalWallet(toConnection(row), row);
    // As it stands after the charge (its failure counted, or its last use).
    const stored = (await d.connections.get(d.db, row.id)) ?? row;
    return { ...toPortalWallet(toConnection(stored), stored), first_payment };
  });

type FirstPayment = NonNullable<PortalWalletConnected['first_payment']>;

/**
 * The first payment of a subscription waiting for it, asked of the wallet just connected as at an NWC
 * checkout (found from outside: nothing was charged, the subscriber had to pay by hand), in words for the
 * subscriber. Undefined: not due after all (paid and applied meanwhile).
 */
async function payFirst(
  d: Deps,
  row: ConnectionRow,
  target: { wallet_id: string; subscriber_id: string; subscription_id: string },
  by: number,
  key: string | undefined,
): Promise<FirstPayment | undefined> {
  const ref = { wallet_id: target.wallet_id, subscription_id: target.subscription_id };
  const notAsked = (why: string): FirstPayment => ({ paid: false, message: notAskedWords(why) });
  // The wallet is asked only while its answer (NWC_REPLY_TIMEOUT_MS) and what follows it (confirming the
  // preimage: a bus call) still come before the caller stops waiting (an older gateway waits 30 s, not
  // 75): a payment made after it would be one nobody is told of (found in review).
  const startBy = by - d.walletReplyMs - Math.min(d.busTimeoutMs, 10_000) - 2_000;
  // Asked after the connection is stored, and for moments only: a slow payments service delays this
  // charge, never the connect (found in review: a 503 after billing had reconnected).
  const asked = callMessage(d.bus, messages.firstPaymentDue, { ...ref, subscriber_id: target.subscriber_id });
  const due = await within(
    asked.catch((err) => {
      d.log.warn({ err: (err as Error).message, subscription_id: target.subscription_id }, 'no first payment for the wallet connected in the portal to pay');
      return null;
    }),
    Math.max(0, Math.min(by - Date.now(), FIRST_INVOICE_WAIT_MS)),
    () => null,
  );
  if (!due) return notAsked('its invoice could not be had just now');
  if (due.state === 'not_due') return undefined;
  if (due.state === 'paid') return { paid: true, message: 'The first payment was made already: the subscription becomes active in a moment.' };
  if (due.state === 'unpayable') return { paid: false, message: `Your wallet was not asked to make the first payment. ${clause(due.reason)}.` };
  if (Date.now() >= startBy) return notAsked('there was no time left to wait for its answer');
  const { payment } = due;
  const amount = satsText(payment.amount_sats);
  // The same request again (its answer was lost): the wallet's refusal is the answer, not a new question.
  const recorded = key ? await d.attempts.refusalOf(d.db, payment.id, key, row.wallet_pubkey, LATE_PAYMENT_WINDOW_S) : undefined;
  const outcome = recorded
    ? recordedRefusal(recorded)
    : await chargeConnection(d, row, { ...payment, purpose: 'checkout', ...(key ? { request_key: key } : {}) }, by, startBy);
  if (outcome.paid) {
    // An attempt in flight when this wallet was connected (the checkout's) may be what paid it.
    const who =
      outcome.payer === row.wallet_pubkey
        ? `Your wallet paid the first payment of ${amount}`
        : `The first payment of ${amount} was paid by the wallet connected before`;
    // As the NWC checkout says it: what billing made of it (found in review: "active" for one cancelled meanwhile).
    const settled = outcome.confirmed ? await settledStatus(d, ref, by) : 'unconfirmed';
    return { paid: true, message: paidWords(who, 'the subscription', settled) };
  }
  // Without error_code where the wallet was not asked (PortalWalletConnected.first_payment; found in review).
  const code = 'notAsked' in outcome || 'earlier' in outcome ? {} : { error_code: outcome.error_code };
  return { paid: false, ...code, message: firstNotPaidWords(outcome, amount) };
}
