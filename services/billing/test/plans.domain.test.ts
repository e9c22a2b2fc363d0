import { describe, expect, it } from 'vitest';
import type { Plan, PlanCreate } from '@sb/contracts';
import { PlanCreate as PlanCreateSchema } from '@sb/contracts';
import { DomainError } from '@sb/runtime';
import { allowedMethods, archivePlan, type MethodAvailability, newPlan, ONCHAIN_DUST_SATS, publicPlan, updatePlan } from '../src/domain/plans.js';

// What the payments service answers (payments.internal.methods) with only a Lightning provider, and with none.
const missing = (m: string) => `${m} payments are not configured on this server (set LIGHTNING_PROVIDER)`;
const nothing: MethodAvailability = {
  lightning: missing('Lightning'),
  nwc: missing('NWC'),
  onchain: missing('On-chain'),
  cardproc: missing('Card'),
  walletproc: missing('Wallet-processor'),
};
const lightningOnly: MethodAvailability = { ...nothing, lightning: null, nwc: null };
const ids = { id: 'plan_1', wallet: 'wal_1', now: 1_700_000_000 };
const create = (over: Partial<PlanCreate> = {}): PlanCreate => PlanCreateSchema.parse({ name: 'Gold', amount_sats: 1000, interval: 'monthly', ...over });

function domainError(fn: () => unknown): DomainError {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
  throw new Error('expected a DomainError');
}

describe('newPlan', () => {
  it('applies the create defaults', () => {
    const p = newPlan(create(), ids, lightningOnly);
    expect(p).toMatchObject({
      id: 'plan_1',
      wallet: 'wal_1',
      trial_days: 0,
      grace_period_days: 0,
      allow_lightning: true,
      allow_onchain: false,
      allow_nwc: false,
      allow_cardproc: false,
      allow_walletproc: false,
      is_deleted: false,
      created_at: ids.now,
      updated_at: ids.now,
    });
  });

  it('requires at least one payment method', () => {
    const err = domainError(() => newPlan(create({ allow_lightning: false }), ids, lightningOnly));
    expect(err.kind).toBe('invalid');
    expect(err.issues).toEqual([{ field: [], msg: 'At least one payment method must be allowed', type: 'value_error' }]);
  });

  it('refuses a method the server has no provider for, naming the configuration', () => {
    const err = domainError(() => newPlan(create(), ids, nothing));
    expect(err.kind).toBe('invalid');
    expect(err.issues).toEqual([expect.objectContaining({ field: ['allow_lightning'], msg: expect.stringContaining('LIGHTNING_PROVIDER') })]);
    const card = domainError(() => newPlan(create({ allow_cardproc: true }), ids, lightningOnly));
    expect(card.issues?.[0]?.field).toEqual(['allow_cardproc']);
  });
});

describe('an on-chain price below dust', () => {
  const onchain: MethodAvailability = { ...lightningOnly, onchain: null };
  const dust = {
    field: ['amount_sats'],
    msg: 'On-chain payments need a price of at least 546 sats: below that the payment is dust, which Bitcoin nodes do not relay',
    type: 'too_small',
  };

  it('is refused when a plan is made with on-chain on, at 545 sats and not at 546', () => {
    expect(ONCHAIN_DUST_SATS).toBe(546);
    expect(domainError(() => newPlan(create({ amount_sats: 545, allow_onchain: true }), ids, onchain)).issues).toEqual([dust]);
    expect(newPlan(create({ amount_sats: 546, allow_onchain: true }), ids, onchain).amount_sats).toBe(546);
    // Other methods take any price.
    expect(newPlan(create({ amount_sats: 1 }), ids, onchain).amount_sats).toBe(1);
  });

  it('is refused when an update turns on-chain on or lowers its price, not on other edits of a plan made before the rule', () => {
    const cheap = newPlan(create({ amount_sats: 100 }), ids, onchain);
    expect(domainError(() => updatePlan(cheap, { allow_onchain: true }, ids.now, onchain)).issues).toEqual([dust]);
    const onchainPlan = newPlan(create({ amount_sats: 1000, allow_onchain: true }), ids, onchain);
    expect(domainError(() => updatePlan(onchainPlan, { amount_sats: 500 }, ids.now, onchain)).issues).toEqual([dust]);
    const older: Plan = { ...onchainPlan, amount_sats: 100 };
    expect(updatePlan(older, { name: 'Renamed' }, ids.now, onchain).name).toBe('Renamed');
    expect(updatePlan(older, { allow_onchain: false, amount_sats: 50 }, ids.now, onchain).amount_sats).toBe(50);
  });
});

describe('updatePlan', () => {
  const base: Plan = newPlan(create({ description: 'd' }), ids, lightningOnly);

  it('changes only given fields and the update time', () => {
    const next = updatePlan(base, { amount_sats: 5 }, ids.now + 10, lightningOnly);
    expect(next).toEqual({ ...base, amount_sats: 5, updated_at: ids.now + 10 });
  });

  it('clears nullable fields with null', () => {
    expect(updatePlan(base, { description: null }, ids.now, lightningOnly).description).toBeNull();
  });

  it('refuses archived plans with 409', () => {
    const { plan } = archivePlan(base, ids.now);
    expect(domainError(() => updatePlan(plan, { name: 'x' }, ids.now, lightningOnly)).kind).toBe('conflict');
  });

  it('checks only the methods the change turns on', () => {
    // Lightning was allowed when the server had it; renaming still works after the provider went away.
    expect(updatePlan(base, { name: 'Renamed' }, ids.now, nothing).name).toBe('Renamed');
    expect(domainError(() => updatePlan(base, { allow_walletproc: true }, ids.now, lightningOnly)).kind).toBe('invalid');
    expect(domainError(() => updatePlan(base, { allow_lightning: false }, ids.now, lightningOnly)).kind).toBe('invalid');
  });
});

describe('archivePlan', () => {
  it('is idempotent: the second archive changes nothing', () => {
    const first = archivePlan(newPlan(create(), ids, lightningOnly), ids.now + 5);
    expect(first.changed).toBe(true);
    expect(first.plan).toMatchObject({ is_deleted: true, updated_at: ids.now + 5 });
    const second = archivePlan(first.plan, ids.now + 9);
    expect(second).toEqual({ plan: first.plan, changed: false });
  });
});

describe('publicPlan', () => {
  it('hides the wallet and provider ids and lists only usable methods', () => {
    const p = { ...newPlan(create({ cardproc_account_id: 'acct_1' }), ids, lightningOnly), allow_onchain: true };
    const pub = publicPlan(p, lightningOnly, 'https://pay.example/subscriptions_manager/checkout/' + p.id);
    expect(pub).not.toHaveProperty('wallet');
    expect(pub).not.toHaveProperty('cardproc_account_id');
    expect(pub.payment_methods).toEqual(['lightning']);
    expect(allowedMethods(p)).toEqual(['lightning', 'onchain']);
  });
});
