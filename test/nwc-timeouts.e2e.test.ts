import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client } from './support/http.js';
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
    const res = await client(stack.api).post('/public/subscribe/nwc', { plan_id: plan.id, email: 'slow@example.com', nwc_connection_string: wallet.connectionString() });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(res.body.status).toBe('active');
    expect(Date.now() - started).toBeGreaterThan(3500);
  });
});
