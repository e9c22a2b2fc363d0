import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSatspayServer, type SatspayServer } from '../services/payments/test/support/satspay-server.js';
import { client } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

/** Lightning checkout through a SatsPay-compatible charge server, confirmed by its callback via the gateway. */
let stack: Stack;
let satspay: SatspayServer;
let db: Stack['db'];

beforeAll(async () => {
  satspay = await startSatspayServer();
  stack = await startStack({
    wallets: 1,
    env: {
      LIGHTNING_PROVIDER: 'chargeproc',
      CHARGEPROC_URL: satspay.url,
      CHARGEPROC_API_KEY: satspay.apiKey,
      CHARGEPROC_LNBITS_WALLET: satspay.wallet,
      ONCHAIN_PROVIDER: 'chargeproc',
      CHARGEPROC_ONCHAIN_WALLET: satspay.onchainWallet,
      PUBLIC_BASE_URL: 'http://127.0.0.1:1',
      // Only the callback may confirm here: the sweeper's provider polling is pushed out of the way.
      PAYMENTS_SWEEP_INTERVAL_MS: '600000',
    },
  });
  db = stack.db;
});
afterAll(async () => {
  await stack?.stop();
  await satspay?.close();
});

async function checkout(email: string, method: 'lightning' | 'onchain' = 'lightning') {
  const admin = client(stack.api, stack.wallets[0]!.admin_key);
  const plan = (await admin.post('/plans', { name: 'Charged', amount_sats: 2100, interval: 'weekly', allow_onchain: method === 'onchain' })).body;
  const res = await client(stack.api).post('/public/subscribe', { plan_id: plan.id, payment_method: method, email });
  expect(res.status).toBe(201);
  return res.body;
}

/** node:http, because the charge server's default callback is a GET with a body, which fetch cannot send. */
function hook(raw: string, method: 'POST' | 'GET' = 'POST'): Promise<{ status: number }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${stack.api}/public/webhook/chargeproc`,
      { method, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(raw) } },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0 }));
      },
    );
    req.on('error', reject);
    req.end(raw);
  });
}

describe('charge server callback', () => {
  it('checkout carries the charge; a forged or unpaid callback changes nothing; the paid one delivered 10 times activates once', async () => {
    const c = await checkout('charged@example.com');
    expect(c.chargeproc_charge_id).toBeTruthy();
    expect(satspay.charges.get(c.chargeproc_charge_id)?.amount).toBe(2100);
    const subOf = async () => (await client(stack.api, stack.wallets[0]!.invoice_key).get(`/subscriptions/${c.subscription_id}`)).body;

    for (const forged of [
      JSON.stringify({ id: 'nope' }),
      '{"id":',
      '"not json',
      JSON.stringify({ ...satspay.chargeJson(c.chargeproc_charge_id), paid: true, id: 'x' }),
    ]) {
      const r = await hook(forged);
      expect(r.status).toBe(400);
    }
    // The body says paid, the charge server does not: only the id is trusted.
    const lying = await hook(JSON.stringify({ ...satspay.chargeJson(c.chargeproc_charge_id), paid: true, balance: 2100 }));
    expect(lying.status).toBe(200);
    expect((await subOf()).status).toBe('pending');

    satspay.pay(c.chargeproc_charge_id);
    const body = JSON.stringify(satspay.chargeJson(c.chargeproc_charge_id));
    const deliveries = await Promise.all([
      ...Array.from({ length: 8 }, () => hook(body)),
      hook(JSON.stringify(body)), // a JSON-encoded string of the JSON
      hook(body, 'GET'), // the charge server's default
    ]);
    for (const r of deliveries) expect(r.status).toBe(200);
    const end = Date.now() + 15_000;
    let sub = await subOf();
    while (sub.status !== 'active' && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 200));
      sub = await subOf();
    }
    expect(sub.status).toBe('active');
    expect(sub.payments).toHaveLength(1);
    expect(sub.current_period_end - sub.current_period_start).toBe(7 * 86_400);
    const applied = await db.query('SELECT count(*)::int AS n FROM billing.applied_payments WHERE subscription_id = $1', [c.subscription_id]);
    expect(applied.rows[0].n).toBe(1);
    const activated = await db.query(
      `SELECT count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'subscription.activated' AND payload->'data'->>'subscription_id' = $1`,
      [c.subscription_id],
    );
    expect(activated.rows[0].n).toBe(1);
    const received = await db.query(
      `SELECT count(*)::int AS n FROM payments.outbox WHERE payload->>'event' = 'payment.received' AND payload->'data'->>'subscription_id' = $1`,
      [c.subscription_id],
    );
    expect(received.rows[0].n).toBe(1);
  });

  it('on-chain: one charge with an address and an invoice, BIP21 with lightning=, three QR codes; underpaid stays pending, paid activates once', async () => {
    const c = await checkout('onchain@example.com', 'onchain');
    const charge = satspay.charges.get(c.chargeproc_charge_id)!;
    expect(charge).toMatchObject({ onchainwallet: satspay.onchainWallet, lnbitswallet: satspay.wallet, amount: 2100, time: 24 * 60 });
    expect(c).toMatchObject({
      payment_method: 'onchain',
      onchain_address: charge.onchainaddress,
      payment_request: charge.payment_request,
      chargeproc_charge_id: charge.id,
      bip21_uri: `bitcoin:${charge.onchainaddress}?amount=0.00002100&lightning=${charge.payment_request}`,
    });
    expect(c.onchain_address).toMatch(/^bc1q[02-9ac-hj-np-z]{38}$/);
    expect(Object.keys(c.qr_codes).sort()).toEqual(['bip21', 'lightning', 'onchain']);
    for (const svg of Object.values(c.qr_codes)) expect(svg).toMatch(/^<svg[\s\S]*<\/svg>\s*$/);
    expect(c.expires_at - Math.floor(Date.now() / 1000)).toBeGreaterThan(23 * 3600);

    const owner = client(stack.api, stack.wallets[0]!.invoice_key);
    const subOf = async () => (await owner.get(`/subscriptions/${c.subscription_id}`)).body;
    satspay.pay(charge.id, 2000); // underpaid: the charge server says unpaid
    expect((await hook(JSON.stringify(satspay.chargeJson(charge.id)))).status).toBe(200);
    expect((await subOf()).status).toBe('pending');
    expect((await owner.get(`/payments/${c.payment_id}`)).body).toMatchObject({
      status: 'pending',
      payment_method: 'onchain',
      onchain_address: charge.onchainaddress,
    });

    satspay.pay(charge.id, 100);
    const body = JSON.stringify(satspay.chargeJson(charge.id));
    for (const r of await Promise.all(Array.from({ length: 10 }, () => hook(body, 'GET')))) expect(r.status).toBe(200);
    const end = Date.now() + 15_000;
    let sub = await subOf();
    while (sub.status !== 'active' && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 200));
      sub = await subOf();
    }
    expect(sub).toMatchObject({ status: 'active', payment_method: 'onchain' });
    const applied = await db.query('SELECT count(*)::int AS n FROM billing.applied_payments WHERE subscription_id = $1', [c.subscription_id]);
    expect(applied.rows[0].n).toBe(1);
    const plan = (await client(stack.api).get(`/public/plan/${sub.plan_id}`)).body;
    expect(plan.payment_methods).toEqual(['lightning', 'onchain']);
  });
});
