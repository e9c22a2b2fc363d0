import { describe, expect, it } from 'vitest';
import { paymentsConfig, providerConfigProblems, type PaymentsConfig } from '../src/config.js';
import { callbackRef, PAYMENT_TRANSITIONS, paymentReceivedData, statesAllowing, toPayment, type PaymentRecord } from '../src/domain/payments.js';
import { z } from 'zod';
import { PaymentEventData } from '@sb/contracts';
import { systemClock } from '@sb/runtime';
import { createRails, missingVariables, PROVIDERS, RAIL_VARIABLES, selectedProviders } from '../src/providers/registry.js';

const record: PaymentRecord = {
  id: 'pay_1',
  wallet_id: 'wal_1',
  subscription_id: 'sub_1',
  plan_id: 'plan_1',
  plan_name: 'Gold',
  amount_sats: 1000,
  status: 'paid',
  payment_method: 'lightning',
  purpose: 'checkout',
  payment_request: 'lnbc1',
  payment_hash: 'ab',
  provider: 'dev',
  provider_ref: 'ab',
  expires_at: 200,
  paid_at: 150,
  created_at: 100,
  idempotency_key: 'k',
  version: 2,
};

describe('payment state machine', () => {
  it('confirms from pending and expired (a late payment counts), expires and fails only from pending', () => {
    expect(statesAllowing('confirm')).toEqual({ from: ['pending', 'expired'], to: 'paid' });
    expect(statesAllowing('expire')).toEqual({ from: ['pending'], to: 'expired' });
    expect(statesAllowing('fail')).toEqual({ from: ['pending'], to: 'failed' });
    expect(PAYMENT_TRANSITIONS.paid).toEqual({});
    expect(PAYMENT_TRANSITIONS.failed).toEqual({});
  });

  it('the resource hides wallet, provider and key; the event data fits the contract', () => {
    expect(toPayment(record)).toEqual({
      id: 'pay_1',
      subscription_id: 'sub_1',
      amount_sats: 1000,
      status: 'paid',
      payment_method: 'lightning',
      payment_request: 'lnbc1',
      payment_hash: 'ab',
      created_at: 100,
      paid_at: 150,
    });
    expect(PaymentEventData.parse(paymentReceivedData(record))).toEqual({
      subscription_id: 'sub_1',
      plan_id: 'plan_1',
      plan_name: 'Gold',
      payment_id: 'pay_1',
      amount_sats: 1000,
      payment_method: 'lightning',
      purpose: 'checkout',
      status: 'paid',
      paid_at: 150,
    });
  });
});

describe('callback body', () => {
  const b = (s: string) => Buffer.from(s);
  const hash = 'AB'.repeat(32);
  it('takes the charge id from JSON, from a JSON-encoded string of it, and nothing else', () => {
    expect(callbackRef(b('{"id":"Ch4rge_1","paid":true,"balance":99}'))).toEqual({ provider: 'chargeproc', ref: 'Ch4rge_1' });
    expect(callbackRef(b(JSON.stringify(JSON.stringify({ id: 'c2' }))))).toEqual({ provider: 'chargeproc', ref: 'c2' });
    expect(callbackRef(b(JSON.stringify({ id: 'c3', payment_hash: hash })))).toEqual({ provider: 'chargeproc', ref: 'c3' });
    expect(callbackRef(b(JSON.stringify({ payment_hash: hash, checking_id: 'x' })))).toEqual({ provider: 'lnbits', ref: hash.toLowerCase() });
  });
  it.each(['', 'nope', '[]', 'null', '42', '"text"', '{"id":""}', '{"id":"a/b"}', '{"id":7}', '{"payment_hash":"short"}', `{"id":"${'x'.repeat(129)}"}`])(
    'rejects %j',
    (raw) => expect(callbackRef(b(raw))).toBeUndefined(),
  );
});

describe('config', () => {
  const base = { DATABASE_URL: 'postgres://x@localhost/db' };
  const parse = (env: Record<string, string>) => z.object(paymentsConfig).parse({ ...base, ...env }) as PaymentsConfig;
  it('names each variable the chosen provider lacks', () => {
    expect(providerConfigProblems(parse({}))).toEqual([]);
    expect(providerConfigProblems(parse({ LIGHTNING_PROVIDER: 'dev' }))).toEqual([]);
    expect(providerConfigProblems(parse({ LIGHTNING_PROVIDER: 'lnbits', LNBITS_URL: 'https://lnbits.example/' }))).toEqual([
      '  LNBITS_INVOICE_KEY: required when LIGHTNING_PROVIDER=lnbits',
    ]);
    expect(providerConfigProblems(parse({ LIGHTNING_PROVIDER: 'chargeproc' }))).toHaveLength(3);
  });
  it('defaults and trims', () => {
    const c = parse({ LNBITS_URL: 'https://lnbits.example/', PUBLIC_BASE_URL: 'https://subs.example/' });
    expect(c.LNBITS_URL).toBe('https://lnbits.example');
    expect(c.PUBLIC_BASE_URL).toBe('https://subs.example');
    expect(c.PAYMENTS_OPS_PORT).toBe(9102);
    expect(c.PAYMENTS_SWEEP_INTERVAL_MS).toBe(1000);
  });
});

describe('provider registry', () => {
  const base = { DATABASE_URL: 'postgres://x@localhost/db' };
  const parse = (env: Record<string, string>) => z.object(paymentsConfig).parse({ ...base, ...env }) as PaymentsConfig;
  const ctx = (env: Record<string, string>) => ({ config: parse(env), clock: systemClock, devStatusOf: async () => undefined });

  it('declares each provider once per rail variable, and the config takes exactly the registered names', () => {
    const keys = PROVIDERS.map((p) => `${p.selectedBy}=${p.name}`);
    expect(new Set(keys).size).toBe(keys.length);
    for (const rail of RAIL_VARIABLES) {
      for (const p of PROVIDERS.filter((x) => x.selectedBy === rail)) expect(() => parse({ [rail]: p.name })).not.toThrow();
      expect(() => parse({ [rail]: 'nosuchprovider' })).toThrow();
    }
    for (const p of PROVIDERS) for (const v of p.requires) expect(Object.keys(paymentsConfig), `${p.name} requires ${v}`).toContain(v);
  });

  it('builds the rails of the selected providers only', () => {
    expect(Object.keys(createRails(ctx({})))).toEqual([]);
    expect(Object.keys(createRails(ctx({ LIGHTNING_PROVIDER: 'dev' }))).sort()).toEqual(['lightning', 'nwc']);
    const all = createRails(
      ctx({ LIGHTNING_PROVIDER: 'dev', ONCHAIN_PROVIDER: 'dev', CARDPROC_PROVIDER: 'dev', WALLETPROC_PROVIDER: 'dev', FIAT_RATE_FIXED: '1' }),
    );
    expect(Object.keys(all).sort()).toEqual(['cardproc', 'lightning', 'nwc', 'onchain', 'walletproc']);
    expect(Object.values(all).every((r) => r?.provider === 'dev')).toBe(true);
    expect(selectedProviders(parse({ CARDPROC_PROVIDER: 'stripe' })).map((p) => p.callback?.route)).toEqual(['webhooks.cardproc']);
  });

  it('names every variable a selected provider lacks', () => {
    expect(missingVariables(parse({ CARDPROC_PROVIDER: 'stripe', WALLETPROC_PROVIDER: 'paypal' }))).toEqual([
      '  STRIPE_SECRET_KEY: required when CARDPROC_PROVIDER=stripe',
      '  STRIPE_WEBHOOK_SECRET: required when CARDPROC_PROVIDER=stripe',
      '  PUBLIC_BASE_URL: required when CARDPROC_PROVIDER=stripe',
      '  PAYPAL_CLIENT_ID: required when WALLETPROC_PROVIDER=paypal',
      '  PAYPAL_CLIENT_SECRET: required when WALLETPROC_PROVIDER=paypal',
      '  PAYPAL_WEBHOOK_ID: required when WALLETPROC_PROVIDER=paypal',
      '  PUBLIC_BASE_URL: required when WALLETPROC_PROVIDER=paypal',
    ]);
  });
});
