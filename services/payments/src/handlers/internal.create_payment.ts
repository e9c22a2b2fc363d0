import { ID_PREFIXES, messages, type CreatePayment, type CreatedPayment } from '@sb/contracts';
import { conflict, DomainError, isDbUnavailable, messageHandler, newId, invalid, unavailable } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { checkoutOf } from '../domain/checkout.js';
import { toPayment, type PaymentRecord } from '../domain/payments.js';
import { isUniqueViolation } from '../store/payments.repo.js';
import { logProviderFailure } from '../providers/http.js';

const notConfigured = (method: string) => invalid(['payment_method'], `${method} payments are not configured on this server`, 'provider_not_configured');
const keyReused = () => conflict('Idempotency key was already used for another payment');
const replacedPaid = (id: string) => conflict(`The payment this one would replace (${id}) is paid: the period is paid, no other payment is made`);

/** The same key may only ever name the same payment. */
function sameRequest(p: PaymentRecord, r: CreatePayment): boolean {
  return p.subscription_id === r.subscription_id && p.amount_sats === r.amount_sats && p.payment_method === r.payment_method;
}

async function created(p: PaymentRecord): Promise<CreatedPayment> {
  return { payment: toPayment(p), checkout: await checkoutOf(p) };
}

const keyOf = (r: { wallet_id: string; idempotency_key: string }) => `${r.wallet_id}\u0000${r.idempotency_key}`;

/** Provider calls of one batch at once: an HTTP provider is not asked a hundred things at the same moment. */
const OPEN_CONCURRENCY = 16;

/** Opens the payment of `req` at its rail's provider; the row to store (not stored yet). */
async function open(d: Deps, req: CreatePayment): Promise<{ payment: Omit<PaymentRecord, 'version'>; devPreimage: string | null }> {
  const rail = d.rails[req.payment_method];
  if (!rail) throw notConfigured(req.payment_method);
  const nowMs = d.clock.nowMs();
  const now = Math.floor(nowMs / 1000);
  if (req.expires_at - now < 1) throw invalid(['expires_at'], 'expires_at must be in the future');
  const expirySeconds = Math.min(req.expires_at - now, d.invoiceMaxExpiryS);
  const fiat = rail.needsFiat ? await logProviderFailure(d.log, { rail: 'fiat rate' }, () => d.rates.quote(req.amount_sats)) : undefined;
  const id = newId(ID_PREFIXES.payment, nowMs);
  const opened = await logProviderFailure(d.log, { subscription_id: req.subscription_id, provider: rail.provider }, () =>
    rail.open({
      payment_id: id,
      wallet_id: req.wallet_id,
      subscription_id: req.subscription_id,
      plan_id: req.plan_id,
      amount_sats: req.amount_sats,
      memo: req.description,
      expiry_seconds: expirySeconds,
      purpose: req.purpose,
      plan: req.plan_settings ?? {},
      ...(fiat ? { fiat } : {}),
    }),
  );
  const payment: Omit<PaymentRecord, 'version'> = {
    id,
    wallet_id: req.wallet_id,
    subscription_id: req.subscription_id,
    plan_id: req.plan_id,
    plan_name: req.plan_name,
    amount_sats: req.amount_sats,
    status: 'pending',
    payment_method: req.payment_method,
    purpose: req.purpose,
    payment_request: opened.payment_request ?? null,
    payment_hash: opened.payment_hash ?? null,
    provider: rail.provider,
    provider_ref: opened.provider_ref,
    onchain_address: opened.onchain_address ?? null,
    onchain_txid: null,
    checkout_url: opened.checkout_url ?? null,
    amount_fiat: fiat?.amount ?? null,
    currency: fiat?.currency ?? null,
    fiat_rate: fiat?.rate ?? null,
    cardproc_payment_id: opened.cardproc_payment_id ?? null,
    walletproc_order_id: opened.walletproc_order_id ?? null,
    failure_reason: null,
    watchonly_wallet_id: opened.watchonly_wallet_id ?? null,
    derivation_index: opened.derivation_index ?? null,
    expires_at: Math.min(now + expirySeconds, opened.expires_at),
    paid_at: null,
    created_at: now,
    idempotency_key: req.idempotency_key,
  };
  return { payment, devPreimage: rail.provider === 'dev' ? (opened.dev_preimage ?? null) : null };
}

/**
 * Opens a payment per request on the rail of its method: an invoice, an address or a processor checkout,
 * stored `pending`. Idempotent on (wallet, idempotency key): a request whose key is already used answers
 * the payment the first call made. Two racing first calls may both reach the provider; only one payment
 * is stored and both answer it (the other provider object simply expires unpaid). Whatever the batch
 * size, the keys are looked up in one statement (not those the caller has just made: `new_key`) and the
 * new payments inserted in one more, so a crash anywhere leaves each key with one payment or none. Each
 * answer is the payment or the DomainError of its own request (the others go on).
 */
export async function createPayments(d: Deps, reqs: CreatePayment[]): Promise<(CreatedPayment | DomainError)[]> {
  // A key the caller has just made cannot name a payment yet: not looked up (a conflict is still handled below).
  const maybeUsed = reqs.filter((r) => !r.new_key);
  const stored = await d.payments.byIdempotencyKeys(d.db, maybeUsed);
  const known = new Map(stored.map((p) => [keyOf(p), p]));
  // A replacement of a payment paid meanwhile (billing has not heard yet) would charge the period twice.
  const paidReplaced = await d.payments.paidAmong(
    d.db,
    reqs.flatMap((r) => (r.replaces && !known.has(keyOf(r)) ? [{ wallet_id: r.wallet_id, id: r.replaces }] : [])),
  );
  const refused = (r: CreatePayment) => !known.has(keyOf(r)) && r.replaces !== undefined && paidReplaced.has(r.replaces);
  // The first request of each unknown key is opened (a key repeated in the batch is a retry of it).
  const firsts = new Map<string, CreatePayment>();
  for (const r of reqs) if (d.rails[r.payment_method] && !known.has(keyOf(r)) && !refused(r) && !firsts.has(keyOf(r))) firsts.set(keyOf(r), r);
  const toOpen = [...firsts.values()];
  const opened: ({ payment: Omit<PaymentRecord, 'version'>; devPreimage: string | null } | DomainError)[] = [];
  for (let i = 0; i < toOpen.length; i += OPEN_CONCURRENCY)
    opened.push(...(await Promise.all(toOpen.slice(i, i + OPEN_CONCURRENCY).map((r) => open(d, r).catch(failureOf(d, r))))));
  const failed = new Map<string, DomainError>();
  const rows: Exclude<(typeof opened)[number], DomainError>[] = [];
  opened.forEach((o, i) => {
    if (o instanceof DomainError) failed.set(keyOf(toOpen[i]!), o);
    else rows.push(o);
  });
  const fresh = new Set<string>();
  for (const p of await store(d, rows, failed)) {
    known.set(keyOf(p), p);
    fresh.add(p.id);
  }
  // Keys a racing caller stored first: its payment is the answer.
  const raced = rows.filter((r) => !known.has(keyOf(r.payment))).map((r) => r.payment);
  for (const p of await d.payments.byIdempotencyKeys(d.db, raced)) known.set(keyOf(p), p);
  return Promise.all(
    reqs.map(async (r) => {
      if (!d.rails[r.payment_method]) return notConfigured(r.payment_method);
      if (r.replaces && paidReplaced.has(r.replaces) && !known.has(keyOf(r))) return replacedPaid(r.replaces);
      const p = known.get(keyOf(r));
      if (!p) {
        const err = failed.get(keyOf(r));
        if (err) return err;
        d.log.error({ subscription_id: r.subscription_id }, 'payment vanished after an idempotency conflict');
        return new DomainError('internal', 'The payment could not be stored, please retry');
      }
      if (!fresh.has(p.id) && !sameRequest(p, r)) return keyReused();
      // A key repeated in the batch with another payment's details is refused like a later call would be.
      if (fresh.has(p.id) && firsts.get(keyOf(r)) !== r && !sameRequest(p, r)) return keyReused();
      return created(p);
    }),
  );
}

/**
 * Stores the opened payments in one statement. A row clashing with another payment on something other
 * than its idempotency key (its provider reference: the counters of two owners who registered one key
 * reaching the same address at the same moment) fails that statement; then each row is stored alone, and
 * the clashing one answers 503 (a retry opens it afresh) while the others of the batch are stored.
 */
async function store(d: Deps, rows: { payment: Omit<PaymentRecord, 'version'>; devPreimage: string | null }[], failed: Map<string, DomainError>) {
  try {
    return await d.payments.insertMany(d.db, rows);
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
  }
  const stored: PaymentRecord[] = [];
  for (const r of rows) {
    try {
      const p = await d.payments.insert(d.db, r.payment, r.devPreimage);
      if (p) stored.push(p);
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
      d.log.warn({ subscription_id: r.payment.subscription_id, constraint: err.constraint }, 'payment clashes with another payment: not stored');
      failed.set(keyOf(r.payment), unavailable('The payment could not be opened this time, please retry'));
    }
  }
  return stored;
}

/**
 * What one request's failure to open answers: an expected failure (provider unavailable, bad request) as
 * it is; anything else logged with an id, as the bus does for a failed message, so that one bad request
 * does not fail the other payments of its batch tick after tick. The database away fails the batch.
 */
const failureOf =
  (d: Deps, req: CreatePayment) =>
  (err: unknown): DomainError => {
    if (err instanceof DomainError) return err;
    if (isDbUnavailable(err)) throw err;
    const id = newId('err_');
    d.log.error({ err, error_id: id, subscription_id: req.subscription_id }, 'opening a payment failed');
    return new DomainError('internal', `Unexpected error! ID: ${id}`);
  };

export const createPaymentHandler = (d: Deps) =>
  messageHandler(messages.createPayment, async (req) => {
    const [result] = await createPayments(d, [req]);
    if (result instanceof DomainError) throw result;
    return result!;
  });

/** A renewal sweep's batch: one message, one lookup and one insert for all of its payments. */
export const createPaymentsHandler = (d: Deps) =>
  messageHandler(messages.createPayments, async ({ payments }) => ({
    results: (await createPayments(d, payments)).map((r) => (r instanceof DomainError ? { error: r.toReply() } : r)),
  }));
