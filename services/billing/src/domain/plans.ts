import { METHOD_FLAGS, PaymentMethod, type Plan, type PlanCreate, type PlanUpdate, type PublicPlan } from '@sb/contracts';
import { conflict, type FieldIssue, invalid, invalidFields, notFoundAs } from './errors.js';

/** For each payment method: null when the server can take it, else what configuration is missing. */
export type MethodAvailability = Record<PaymentMethod, string | null>;

const METHODS = PaymentMethod.options;

export function allowedMethods(plan: Pick<Plan, (typeof METHOD_FLAGS)[PaymentMethod]>): PaymentMethod[] {
  return METHODS.filter((m) => plan[METHOD_FLAGS[m]]);
}

/**
 * The smallest on-chain price: an output below it is dust, which Bitcoin nodes do not relay (546 sats,
 * Bitcoin Core's limit for a P2PKH output at its default dust fee, the highest of the address types), so
 * no wallet can pay it.
 */
export const ONCHAIN_DUST_SATS = 546;

/**
 * The checks shared by create and update: at least one method, every method this request turns on
 * must be configured on the server, and an on-chain price of at least the dust limit. Methods left on
 * from before are not re-checked, so a change of server configuration does not lock owners out of
 * editing a plan's name; nor is the price of a plan that had on-chain on at it before (made before the
 * rule).
 */
function checkMethods(next: Plan, turnedOn: PaymentMethod[], availability: MethodAvailability, before?: Plan): void {
  const issues: FieldIssue[] = [];
  if (allowedMethods(next).length === 0) {
    issues.push({ field: [], msg: 'At least one payment method must be allowed', type: 'value_error' });
  }
  const repriced = !before?.allow_onchain || before.amount_sats !== next.amount_sats;
  if (next.allow_onchain && next.amount_sats < ONCHAIN_DUST_SATS && repriced) {
    issues.push({
      field: ['amount_sats'],
      msg: `On-chain payments need a price of at least ${ONCHAIN_DUST_SATS} sats: below that the payment is dust, which Bitcoin nodes do not relay`,
      type: 'too_small',
    });
  }
  for (const m of turnedOn) {
    const missing = availability[m];
    if (missing) issues.push({ field: [METHOD_FLAGS[m]], msg: missing, type: 'provider_not_configured' });
  }
  if (issues.length) throw invalidFields(issues);
}

export function newPlan(input: PlanCreate, ids: { id: string; wallet: string; now: number }, availability: MethodAvailability): Plan {
  const plan: Plan = {
    id: ids.id,
    wallet: ids.wallet,
    name: input.name,
    description: input.description ?? null,
    amount_sats: input.amount_sats,
    interval: input.interval,
    trial_days: input.trial_days,
    grace_period_days: input.grace_period_days,
    allow_lightning: input.allow_lightning,
    allow_onchain: input.allow_onchain,
    allow_nwc: input.allow_nwc,
    allow_cardproc: input.allow_cardproc,
    allow_walletproc: input.allow_walletproc,
    watchonly_wallet_id: input.watchonly_wallet_id ?? null,
    cardproc_account_id: input.cardproc_account_id ?? null,
    walletproc_merchant_id: input.walletproc_merchant_id ?? null,
    created_at: ids.now,
    updated_at: ids.now,
    is_deleted: false,
  };
  checkMethods(plan, allowedMethods(plan), availability);
  return plan;
}

/** Existing subscriptions keep their own snapshot of price and interval, so any field may change here. */
export function updatePlan(plan: Plan, change: PlanUpdate, now: number, availability: MethodAvailability): Plan {
  if (plan.is_deleted) throw conflict('Plan is archived and cannot be changed');
  const defined = Object.fromEntries(Object.entries(change).filter(([, v]) => v !== undefined));
  const next: Plan = { ...plan, ...defined, updated_at: now };
  const before = new Set(allowedMethods(plan));
  checkMethods(
    next,
    allowedMethods(next).filter((m) => !before.has(m)),
    availability,
    plan,
  );
  return next;
}

const noWatchonly = (msg: string) => invalid(['watchonly_wallet_id'], msg, 'value_error');

/**
 * A plan naming a watch-only wallet must name one of the owner's (looked up at the payments service,
 * then `requireWatchonlyFound`), whatever the provider, so no plan is ever tied to another wallet's
 * key. With ONCHAIN_PROVIDER=esplora (`required`) on-chain payments go to fresh addresses of that
 * wallet, so a plan taking them must name one. Like the methods above, only a plan that sets or changes
 * its wallet, or turns on-chain on, is checked. Throws when the id is missing; returns the id to look
 * up, or null when nothing needs it.
 */
export function watchonlyToLookUp(next: Plan, before: Plan | undefined, required: boolean): string | null {
  const changed = next.watchonly_wallet_id !== (before?.watchonly_wallet_id ?? null);
  if (required && next.allow_onchain && !next.watchonly_wallet_id && (changed || !before?.allow_onchain)) {
    throw noWatchonly('On-chain payments need a watch-only wallet: set watchonly_wallet_id to one of yours (POST /watchonly-wallets)');
  }
  return next.watchonly_wallet_id && changed ? next.watchonly_wallet_id : null;
}

/** An id of another wallet's (or no) watch-only wallet is not found, as for ids in paths. */
export function requireWatchonlyFound(exists: boolean): void {
  if (!exists) throw notFoundAs('Watch-only wallet not found');
}

export function archivePlan(plan: Plan, now: number): { plan: Plan; changed: boolean } {
  if (plan.is_deleted) return { plan, changed: false };
  return { plan: { ...plan, is_deleted: true, updated_at: now }, changed: true };
}

export function publicPlan(plan: Plan, availability: MethodAvailability, checkoutUrl: string): PublicPlan {
  return {
    id: plan.id,
    name: plan.name,
    description: plan.description ?? null,
    amount_sats: plan.amount_sats,
    interval: plan.interval,
    trial_days: plan.trial_days,
    grace_period_days: plan.grace_period_days,
    allow_lightning: plan.allow_lightning,
    allow_onchain: plan.allow_onchain,
    allow_nwc: plan.allow_nwc,
    allow_cardproc: plan.allow_cardproc,
    allow_walletproc: plan.allow_walletproc,
    payment_methods: allowedMethods(plan).filter((m) => availability[m] === null),
    available_contact_methods: ['email'],
    checkout_url: checkoutUrl,
  };
}
