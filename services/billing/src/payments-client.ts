import { messages, type CreatePayment, type CreatedPayment, type CreatedPayments, type NwcChargeResult, type Plan } from '@sb/contracts';
import { type BusClient, BusUnavailableError, callMessage, DomainError } from '@sb/runtime';
import type { MethodAvailability } from './domain/plans.js';
import type { Deps } from './deps.js';
import type { SubRow } from './store/subscriptions.repo.js';

/**
 * Asks the payments service for a payment of the subscription on its method, with the plan's rail
 * settings. Idempotent on `idempotency_key`.
 */
export function requestPayment(d: Pick<Deps, 'bus'>, plan: Plan | undefined, sub: PaymentSub, o: PaymentAsk): Promise<CreatedPayment> {
  return callMessage(d.bus, messages.createPayment, paymentRequest(plan, sub, o));
}

type PaymentSub = Pick<SubRow, 'id' | 'wallet_id' | 'plan_id' | 'amount_sats' | 'payment_method'>;
type PaymentAsk = Pick<CreatePayment, 'purpose' | 'description' | 'expires_at' | 'idempotency_key' | 'new_key' | 'replaces'>;

function paymentRequest(plan: Plan | undefined, sub: PaymentSub, o: PaymentAsk): CreatePayment {
  return {
    wallet_id: sub.wallet_id,
    subscription_id: sub.id,
    plan_id: sub.plan_id,
    plan_name: plan?.name ?? '',
    amount_sats: sub.amount_sats,
    payment_method: sub.payment_method,
    ...o,
    plan_settings: {
      watchonly_wallet_id: plan?.watchonly_wallet_id ?? null,
      cardproc_account_id: plan?.cardproc_account_id ?? null,
      walletproc_merchant_id: plan?.walletproc_merchant_id ?? null,
    },
  };
}

/**
 * `requestPayment` for many subscriptions in one message (at most RENEWAL_BATCH_MAX): each answer is
 * that payment, or the DomainError its own request met (the others are made all the same).
 */
export async function requestPayments(
  d: Pick<Deps, 'bus'>,
  asks: { plan: Plan | undefined; sub: PaymentSub; o: PaymentAsk }[],
): Promise<(CreatedPayment | DomainError)[]> {
  const requests = asks.map((a) => paymentRequest(a.plan, a.sub, a.o));
  let results: CreatedPayments['results'];
  try {
    ({ results } = await callMessage(d.bus, messages.createPayments, { payments: requests }));
  } catch (err) {
    if (!(err instanceof BusUnavailableError && err.noResponders)) throw err;
    return oneByOne(d, requests);
  }
  if (results.length !== asks.length) throw new Error(`create_payments answered ${results.length} of ${asks.length} requests`);
  return results.map((r) => ('error' in r ? new DomainError(r.error.kind, r.error.message, r.error.issues) : r));
}

/** Single requests under way at once when the batch message has nobody to answer it. */
const ONE_BY_ONE_CONCURRENCY = 8;

/**
 * The batch, one request per payment: nobody answers the batch message while the payments service still
 * runs a version from before it (a rolling update), and renewals must not stop meanwhile. Each request is
 * idempotent on its key, so a payment the batch did make is answered again, not made twice.
 */
async function oneByOne(d: Pick<Deps, 'bus'>, requests: CreatePayment[]): Promise<(CreatedPayment | DomainError)[]> {
  const out: (CreatedPayment | DomainError)[] = [];
  for (let i = 0; i < requests.length; i += ONE_BY_ONE_CONCURRENCY) {
    const chunk = requests.slice(i, i + ONE_BY_ONE_CONCURRENCY).map((r) =>
      callMessage(d.bus, messages.createPayment, r).catch((err: unknown) => {
        if (err instanceof DomainError) return err;
        throw err;
      }),
    );
    out.push(...(await Promise.all(chunk)));
  }
  return out;
}

/** Whether `id` is one of the owner's watch-only wallets (they live in the payments service). */
export async function watchonlyWalletExists(d: Pick<Deps, 'bus'>, walletId: string, id: string): Promise<boolean> {
  return (await callMessage(d.bus, messages.watchonlyWalletExists, { wallet_id: walletId, id })).exists;
}

/** Asks the NWC service to pay a payment of the subscription with its connected wallet (waits for the wallet). */
export function chargeWithWallet(
  d: Pick<Deps, 'bus'>,
  sub: Pick<SubRow, 'id' | 'wallet_id'>,
  payment: { id: string; payment_request: string; amount_sats: number },
): Promise<NwcChargeResult> {
  return callMessage(d.bus, messages.nwcCharge, {
    wallet_id: sub.wallet_id,
    subscription_id: sub.id,
    payment_id: payment.id,
    payment_request: payment.payment_request,
    amount_sats: payment.amount_sats,
    answer_by: Date.now() + d.bus.waitMs(messages.nwcCharge.timeoutMs),
  });
}

export interface PaymentMethods {
  availability: MethodAvailability;
  /** ONCHAIN_PROVIDER=esplora in payments: a plan taking on-chain payments must name one of the owner's watch-only wallets. */
  watchonlyRequired: boolean;
}

/**
 * The payments service's methods, asked at most every `ttlMs` (PAYMENT_METHODS_TTL_MS: a plan page or
 * checkout must not cost a round trip; a provider change is a payments restart, seen within it). An
 * older answer is used at once while a fresh one is asked in the background, one ask at a time: a hung
 * payments service would otherwise hold every plan page and checkout for the bus timeout (503) once per
 * `ttlMs`. So while payments does not answer, the last answer holds; with none yet, the caller waits for
 * the ask and gets its bus error (503).
 */
export function paymentMethodsOf(bus: BusClient, ttlMs: number, now = () => Date.now()): () => Promise<PaymentMethods> {
  let last: { at: number; value: PaymentMethods } | undefined;
  let asking: Promise<PaymentMethods> | undefined;
  return () => {
    if (last && now() - last.at < ttlMs) return Promise.resolve(last.value);
    asking ??= callMessage(bus, messages.paymentMethods, {})
      .then((r) => {
        last = { at: now(), value: { availability: r.methods, watchonlyRequired: r.watchonly_required } };
        return last.value;
      })
      .finally(() => {
        asking = undefined;
      });
    if (!last) return asking;
    // Its failure is the next caller's reason to ask again; nobody waits for it.
    asking.catch(() => undefined);
    return Promise.resolve(last.value);
  };
}
