import { CONTACTS_UNCHANGED, contactsUnchanged, ID_PREFIXES, messages, type NWCErrorCode, satsText, utcMinute } from '@sb/contracts';
import { BusUnavailableError, callMessage, newId, routeHandler, invalid, within, type RouteReply, type RouteRequest } from '@sb/runtime';
import { ConnectionStringError, parseConnectionString } from '../connection-string.js';
import type { Deps } from '../deps.js';
import { answerBy, chargeConnection, routeWaitMs } from '../charge.js';
import { WalletCheckError, type Encryption } from '../nip47.js';
import type { WalletConnection } from '../connection-string.js';
import { checkoutNotPaidWords, paidWords, type Settled } from '../domain/words.js';
import { LATE_PAYMENT_WINDOW_S, notPaidFields, recordedRefusal } from '../domain/charge.js';
import { setTimeout as sleep } from 'node:timers/promises';

/** A connection string or wallet refused in words: 422 naming the field; anything else as it was. */
function inWords(err: unknown): never {
  if (err instanceof ConnectionStringError || err instanceof WalletCheckError) throw invalid(['nwc_connection_string'], err.message);
  throw err;
}

/** A connection string's own form, checked without contacting anyone. */
export function wellFormed(s: string): void {
  try {
    parseConnectionString(s);
  } catch (err) {
    inWords(err);
  }
}

/** The wallet behind a connection string, checked (relay, info event, pay_invoice). */
export async function checked(d: Deps, s: string): Promise<{ conn: WalletConnection; encryption: Encryption }> {
  try {
    return await d.nip47.validate(s);
  } catch (err) {
    return inWords(err);
  }
}

/** Who a wallet connection pays for: the subscription and what its notices need. */
interface ConnectionOwner {
  wallet_id: string;
  subscriber_id: string;
  subscription_id: string;
  plan_id: string;
  plan_name: string;
  max_amount_sats: number | null;
  subscriber_email: string | null;
  subscriber_name: string | null;
}

/**
 * Stores a checked wallet for a subscription, its secret sealed, retiring the subscription's earlier
 * connection in the same transaction (a subscription pays from one wallet at a time).
 */
export async function storeConnection(d: Deps, owner: ConnectionOwner, conn: WalletConnection, encryption: Encryption) {
  const nowMs = d.clock.nowMs();
  const now = Math.floor(nowMs / 1000);
  const row = {
    ...owner,
    id: newId(ID_PREFIXES.nwc, nowMs),
    wallet_pubkey: conn.pubkey,
    relay_url: conn.relays[0]!,
    relays: conn.relays,
    secret_sealed: d.secrets.seal(conn.secret),
    encryption,
    is_active: true,
    last_used_at: null,
    last_error: null,
    last_error_code: null,
    consecutive_failures: 0,
    created_at: now,
    updated_at: now,
    disconnected_at: null,
  };
  await d.db.tx(async (tx) => {
    await d.connections.lockSubscription(tx, row.subscription_id);
    await d.connections.retireForSubscription(tx, row.wallet_id, row.subscription_id, now);
    await d.connections.insert(tx, row);
  });
  return row;
}

/** How long a paid checkout's answer waits for billing to apply the payment (its event is on its way). */
const ACTIVATION_WAIT_MS = 10_000;

/**
 * The subscription's status as billing holds it once it is no longer pending, asked until `by` (at most
 * ACTIVATION_WAIT_MS from now; each ask bounded by what is left, a hung billing included): a subscription
 * read right after the answer then says what the answer said. Undefined when it is still pending then, or
 * billing did not answer. A billing that cannot be asked (older, without the subject) is taken at the
 * payment's word: 'active', as before it could be asked.
 */
export async function settledStatus(d: Deps, ref: { wallet_id: string; subscription_id: string }, by: number): Promise<Settled | undefined> {
  const until = Math.min(by, Date.now() + ACTIVATION_WAIT_MS);
  const pending = { status: 'pending' };
  for (let pause = 25; Date.now() < until; pause = Math.min(pause * 2, 200)) {
    const asked = callMessage(d.bus, messages.subscriptionStatus, ref).then(
      (r): Settled => r,
      (err) => (err instanceof BusUnavailableError && (err.noResponders || err.refused) ? { status: 'active' } : pending),
    );
    const settled = await within(asked, until - Date.now(), () => pending);
    if (settled.status !== 'pending') return settled;
    if (Date.now() + pause >= until) return undefined;
    await sleep(pause);
  }
  return undefined;
}

/** Subscribe with automatic payments (see subscribed), saying what a returning subscriber's checkout kept. */
export const subscribe = (d: Deps) =>
  routeHandler('public.subscribe.nwc', async (req) => {
    const answer = await subscribed(d, req);
    // A returning subscriber's other contact details were not stored (billing keeps the known ones): said.
    if (!contactsUnchanged(req.body, answer.manage_url)) return answer;
    return { ...answer, contacts_unchanged: true as const, message: `${answer.message} ${CONTACTS_UNCHANGED}` };
  });

/**
 * The wallet is checked first (nothing is created for an unusable one), billing creates the subscription
 * and its first invoice, the connection is stored with its secret sealed, and the wallet pays at once. A
 * payment the wallet refuses or does not answer leaves the subscription pending (201 with the NIP-47
 * error code) and counts as a failure of the connection.
 */
async function subscribed(d: Deps, req: RouteRequest<'public.subscribe.nwc'>): Promise<RouteReply<'public.subscribe.nwc'>> {
  const by = answerBy(d, routeWaitMs('public.subscribe.nwc'), req.caller.answer_by);
  const body = req.body;
  const { nwc_connection_string: _secret, ...rest } = body;
  // The plan and the contacts first: no relay is contacted for a plan that cannot be had (found from
  // outside: an unknown plan was answered as the wallet's relay being unreachable). The check asks
  // nothing the subscribe below does not: when it cannot be asked (an older billing without it, an
  // auth.conf older than the code) the subscribe says the same refusals. Any other failure (billing not
  // answering in time, NATS away) would fail the subscribe too: 503 now, without contacting the wallet.
  await callMessage(d.bus, messages.subscribeNwcCheck, rest).catch((err) => {
    if (!(err instanceof BusUnavailableError && (err.noResponders || err.refused))) throw err;
  });
  const { conn, encryption } = await checked(d, body.nwc_connection_string);
  const sub = await callMessage(d.bus, messages.subscribeNwc, rest);
  // The portal link only when this request created the subscriber (behaviour.md): no key at all otherwise.
  const base = { subscription_id: sub.subscription_id, ...(sub.manage_url ? { manage_url: sub.manage_url } : {}) };
  // No answer in time is no refusal: the wallet may pay in the minutes after (found from outside: "did
  // not pay", then active), which the answer says (may_still_pay) rather than advise paying another way.
  const notPaid = (outcome: { error_code: NWCErrorCode; message: string; mayStillPay?: true }) => ({
    ...base,
    status: 'pending' as const,
    ...notPaidFields(outcome),
    message: checkoutNotPaidWords(outcome),
  });
  // The same request again (its answer was lost): the wallet's refusal is the answer, not a new question.
  const key = req.caller.idempotency_key;
  const recorded = sub.payment && key ? await d.attempts.refusalOf(d.db, sub.payment.id, key, conn.pubkey, LATE_PAYMENT_WINDOW_S) : undefined;
  if (recorded) return notPaid(recordedRefusal(recorded));
  const row = await storeConnection(
    d,
    {
      wallet_id: sub.wallet_id,
      subscriber_id: sub.subscriber_id,
      subscription_id: sub.subscription_id,
      plan_id: body.plan_id,
      plan_name: sub.plan_name,
      max_amount_sats: body.max_amount_sats ?? null,
      subscriber_email: body.email ?? null,
      subscriber_name: body.name ?? null,
    },
    conn,
    encryption,
  );
  d.log.info({ connection_id: row.id, subscription_id: sub.subscription_id, encryption }, 'nwc wallet connected');
  if (!sub.payment) {
    // When the wallet is first charged is what a person starting a trial wants to know.
    const started = sub.trial
      ? `Your ${sub.trial.days}-day free trial of ${sub.plan_name} has started; it ends on ${utcMinute(sub.trial.end)}`
      : `Your free trial of ${sub.plan_name} has started`;
    return { ...base, status: 'active', message: `${started}, then your wallet pays the renewals automatically.` };
  }
  const outcome = await chargeConnection(d, row, { ...sub.payment, purpose: 'checkout', ...(key ? { request_key: key } : {}) }, by);
  if (outcome.paid) {
    const settled = outcome.confirmed ? await settledStatus(d, { wallet_id: sub.wallet_id, subscription_id: sub.subscription_id }, by) : 'unconfirmed';
    // The answer's status can only say active or pending; the words say what it is.
    const message = paidWords(`Your wallet paid ${satsText(sub.payment.amount_sats)}`, `your subscription to ${sub.plan_name}`, settled);
    return { ...base, status: typeof settled === 'object' && settled.status === 'active' ? ('active' as const) : ('pending' as const), message };
  }
  return notPaid(outcome);
}
