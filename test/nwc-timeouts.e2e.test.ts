import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../scripts/stack.mjs';
import { client, until } from './support/http.js';
import { startNostrRelay, type NostrRelay } from './support/nostr-relay.js';
import { startNwcWallet, type NwcWallet } from './support/nwc-wallet.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * The NWC checkout waits on a remote wallet for longer than a bus request normally may: the route
 * carries its own wait (busTimeoutMs), so a short BUS_TIMEOUT_MS does not turn a slow wallet into a 503.
 */
let stack: Stack;
let relay: NostrRelay;
let wallet: NwcWallet;

beforeAll(async () => {
  relay = await startNostrRelay();
  stack = await startStack({ wallets: 1, env: { BUS_TIMEOUT_MS: '2000', NWC_INFO_TIMEOUT_MS: '3000', NWC_REPLY_TIMEOUT_MS: '8000' } });
  wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
});
afterAll(async () => {
  await wallet?.stop();
  await stack?.stop();
  await relay?.stop();
});

describe('a slow wallet', () => {
  it('answering after longer than BUS_TIMEOUT_MS still activates the subscription in the same request', async () => {
    const admin = client(stack.api, stack.wallets[0]!.admin_key);
    const plan = (await admin.post('/plans', { name: 'Patient', amount_sats: 1200, interval: 'monthly', allow_nwc: true })).body;
    wallet.setBehaviour({ pay: true, delayMs: 3500 });
    const started = Date.now();
    const res = await client(stack.api).post('/public/subscribe/nwc', {
      plan_id: plan.id,
      email: 'slow@example.com',
      nwc_connection_string: wallet.connectionString(),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(res.body.status).toBe('active');
    expect(Date.now() - started).toBeGreaterThan(3500);
  });

  it('while one billing replica waits for the wallet, another does not lapse the period', async () => {
    const second = await startService('billing', stack.env);
    const db = stack.db;
    try {
      const admin = client(stack.api, stack.wallets[0]!.admin_key);
      const plan = (await admin.post('/plans', { name: 'Two replicas', amount_sats: 1300, interval: 'weekly', grace_period_days: 2, allow_nwc: true })).body;
      wallet.setBehaviour({ pay: true });
      const res = await client(stack.api).post('/public/subscribe/nwc', {
        plan_id: plan.id,
        email: 'replicas@example.com',
        nwc_connection_string: wallet.connectionString(),
      });
      expect(res.body.status).toBe('active');
      const sub = await until(
        async () => (await admin.get(`/subscriptions/${res.body.subscription_id}`)).body,
        (x) => x.status === 'active',
      );
      // The renewal's wallet answers after 4 s; both replicas sweep every 300 ms meanwhile.
      wallet.setBehaviour({ pay: true, delayMs: 4000 });
      const now = (await admin.post('/dev/clock', {})).body.now;
      await admin.post('/dev/clock', { advance_seconds: sub.current_period_end + 60 - now }); // may answer 503: the sweep waits for the wallet
      const renewed = await until(
        async () => (await admin.get(`/subscriptions/${res.body.subscription_id}`)).body,
        (x) => x.current_period_start === sub.current_period_end,
        30_000,
      );
      expect(renewed.status).toBe('active');
      const { rows } = await db.query(`SELECT payload->>'event' AS e FROM billing.outbox WHERE payload->'data'->>'subscription_id' = $1 ORDER BY seq`, [
        res.body.subscription_id,
      ]);
      expect(rows.map((r) => r.e)).toEqual(['subscription.created', 'subscription.activated', 'subscription.renewed']);
    } finally {
      await second.stop();
    }
  });
});
