import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseExtendedKey, receiveAddress } from '../services/payments/src/domain/derivation.js';
import { startEsploraServer, type EsploraServer } from '../services/payments/test/support/esplora-server.js';
import { client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * On-chain payments to the owner's own watch-only wallet, watched through a local Esplora: addresses
 * from the BIP84 vector's zpub, an index never handed out twice (also across a restart), paid at two
 * confirmations by the sweeper's polling, a late payment after expiry still applied. This file owns its
 * stack: it moves the test clock.
 */
const ZPUB = 'zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1ADqtfSdVCToUG868RvUUkgDKf31mGDtKsAYz2oz2AGutZYs';
const ADDR_0 = 'bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu';
const ADDR_1 = 'bc1qnjg0jd8228aq7egyzacy8cys3knf9xvrerkf9g';
/** BIP32's test vector 1 master key, public and private: another owner's key, and a key nobody may register. */
const OTHER_XPUB = 'xpub661MyMwAqRbcFtXgS5sYJABqqG9YLmC4Q1Rdap9gSE8NqtwybGhePY2gZ29ESFjqJoCu1Rupje8YtGqsefD265TMg7usUDFdp6W1EGMcet8';
const XPRV = 'xprv9s21ZrQH143K3QTDL4LXw2F7HEK3wJUD2nW2nRk4stbPy6cq3jPPqjiChkVvvNKmPGJxWUtg6LnF5kejMRNNU3TGtRBeJgk33yuGBxrMPHi';
const PRICE = 50_000;

let stack: Stack;
let esplora: EsploraServer;
let db: Stack['db'];
let admin: ReturnType<typeof client>;
let owner: ReturnType<typeof client>;
let watchonlyId: string;
let planId: string;

beforeAll(async () => {
  esplora = await startEsploraServer('mainnet');
  stack = await startStack({
    wallets: 2,
    env: {
      ONCHAIN_PROVIDER: 'esplora',
      ESPLORA_URL: esplora.url,
      ONCHAIN_CONFIRMATIONS: '2',
      ONCHAIN_RECHECK_S: '1',
      PAYMENTS_SWEEP_INTERVAL_MS: '300',
      // A clock move waits for the sweep it triggers, which can outlast the default bus timeout on a slow machine.
      BUS_TIMEOUT_MS: '60000',
    },
  });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
  owner = client(stack.api, stack.wallets[0]!.invoice_key);
  db = stack.db;
});
afterAll(async () => {
  await stack?.stop();
  await esplora?.close();
});

/** Waits until the payments service has asked Esplora about `address` after now, and the answer has had time to be applied. */
async function polled(address: string): Promise<void> {
  const since = Date.now();
  const seen = await until(
    async () => esplora.requests.some((r) => r.at >= since && r.path === `/address/${address}/txs`),
    (v) => v,
  );
  expect(seen, `no status read of ${address}`).toBe(true);
  await new Promise((r) => setTimeout(r, 1000));
}

async function subscribe(email: string) {
  const res = await client(stack.api).post('/public/subscribe', { plan_id: planId, payment_method: 'onchain', email });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body as { payment_id: string; subscription_id: string; onchain_address: string; bip21_uri: string; expires_at: number };
}

const paymentOf = async (id: string) => (await owner.get(`/payments/${id}`)).body;
const subOf = async (id: string) => (await owner.get(`/subscriptions/${id}`)).body;

async function appliedOnce(c: { payment_id: string; subscription_id: string }) {
  const applied = await db.query('SELECT count(*)::int AS n FROM billing.applied_payments WHERE subscription_id = $1', [c.subscription_id]);
  expect(applied.rows[0].n).toBe(1);
  const received = await db.query(
    `SELECT count(*)::int AS n FROM payments.outbox WHERE payload->>'event' = 'payment.received' AND payload->'data'->>'payment_id' = $1`,
    [c.payment_id],
  );
  expect(received.rows[0].n).toBe(1);
  const activated = await db.query(
    `SELECT count(*)::int AS n FROM billing.outbox WHERE payload->>'event' = 'subscription.activated' AND payload->'data'->>'subscription_id' = $1`,
    [c.subscription_id],
  );
  expect(activated.rows[0].n).toBe(1);
}

describe('watch-only wallets', () => {
  it("the owner registers a zpub and sees its first address; private keys and garbage are 422; reads are the owner's own", async () => {
    expect((await owner.post('/watchonly-wallets', { name: 'Cold', xpub: ZPUB })).status).toBe(403);
    const res = await admin.post('/watchonly-wallets', { name: 'Cold storage', xpub: ZPUB });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^wow_/),
      name: 'Cold storage',
      key_type: 'zpub',
      network: 'mainnet',
      first_address: ADDR_0,
      created_at: expect.any(Number),
    });
    watchonlyId = res.body.id;

    for (const [xpub, msg] of [
      [XPRV, /private key/],
      ['not a key', /Not an extended public key/],
      [ZPUB.slice(0, -1) + 'x', /checksum/],
    ] as const) {
      const bad = await admin.post('/watchonly-wallets', { name: 'Bad', xpub });
      expect(bad.status).toBe(422);
      expect(bad.body.detail).toEqual([{ loc: ['body', 'xpub'], msg: expect.stringMatching(msg), type: 'value_error' }]);
    }
    expect((await admin.post('/watchonly-wallets', { name: '', xpub: ZPUB })).status).toBe(422);
    // The same key again (here in its xpub spelling) would hand out the same addresses twice.
    const xpubSpelling = parseExtendedKey(ZPUB).normalized;
    expect((await admin.post('/watchonly-wallets', { name: 'Again', xpub: xpubSpelling })).status).toBe(409);

    expect((await owner.get(`/watchonly-wallets/${watchonlyId}`)).body).toEqual(res.body);
    const list = await owner.get('/watchonly-wallets?limit=10');
    expect(list.body).toEqual({ items: [res.body], total: 1, limit: 10, offset: 0 });
    const stranger = client(stack.api, stack.wallets[1]!.admin_key);
    expect((await stranger.get(`/watchonly-wallets/${watchonlyId}`)).status).toBe(404);
    expect((await stranger.get('/watchonly-wallets')).body.total).toBe(0);
    const row = (await db.query('SELECT wallet_id, xpub, normalized_key, next_index FROM payments.watchonly_wallets WHERE id = $1', [watchonlyId])).rows[0];
    expect(row).toEqual({ wallet_id: stack.wallets[0]!.id, xpub: ZPUB, normalized_key: xpubSpelling, next_index: 0 });
    // Another owner registering the same key learns nothing about this one (and cannot squat it): 201, its own counter.
    const same = await stranger.post('/watchonly-wallets', { name: 'Same key', xpub: ZPUB });
    expect(same.status).toBe(201);
    expect(same.body.id).not.toBe(watchonlyId);
    expect((await stranger.get('/watchonly-wallets')).body.total).toBe(1);
  });

  it("a plan taking on-chain payments must name one of the owner's watch-only wallets", async () => {
    const stranger = client(stack.api, stack.wallets[1]!.admin_key);
    const foreign = await stranger.post('/watchonly-wallets', { name: 'Theirs', xpub: OTHER_XPUB });
    expect(foreign.status).toBe(201);
    const base = { name: 'On-chain Gold', amount_sats: PRICE, interval: 'monthly', allow_onchain: true };
    for (const watchonly_wallet_id of [undefined, null]) {
      const res = await admin.post('/plans', { ...base, ...(watchonly_wallet_id !== undefined ? { watchonly_wallet_id } : {}) });
      expect(res.status, String(watchonly_wallet_id)).toBe(422);
      expect(res.body.detail).toEqual([{ loc: ['body', 'watchonly_wallet_id'], msg: expect.any(String), type: 'value_error' }]);
    }
    // Another wallet's (or no) watch-only wallet is not found, as for ids in paths, on any plan.
    for (const watchonly_wallet_id of [foreign.body.id, 'wow_unknown']) {
      for (const body of [
        { ...base, watchonly_wallet_id },
        { name: 'Lightning', amount_sats: 1000, interval: 'weekly', watchonly_wallet_id },
      ]) {
        const res = await admin.post('/plans', body);
        expect(res.status, String(watchonly_wallet_id)).toBe(404);
      }
    }
    // Lightning-only plans need none.
    expect((await admin.post('/plans', { name: 'Lightning only', amount_sats: 1000, interval: 'weekly' })).status).toBe(201);

    const plan = await admin.post('/plans', { ...base, watchonly_wallet_id: watchonlyId });
    expect(plan.status, JSON.stringify(plan.body)).toBe(201);
    planId = plan.body.id;
    // A price no wallet can pay on-chain (dust) is refused, on create and update, and nothing changes.
    const count = (await admin.get('/plans')).body.total;
    const dust = await admin.post('/plans', { ...base, amount_sats: 545, watchonly_wallet_id: watchonlyId });
    expect([dust.status, dust.body.detail]).toEqual([
      422,
      [{ loc: ['body', 'amount_sats'], msg: expect.stringContaining('at least 546 sats'), type: 'too_small' }],
    ]);
    expect((await admin.put(`/plans/${planId}`, { amount_sats: 545 })).status).toBe(422);
    expect((await admin.get('/plans')).body.total).toBe(count);
    expect((await admin.get(`/plans/${planId}`)).body.amount_sats).toBe(PRICE);
    expect((await admin.post('/plans', { ...base, amount_sats: 546, watchonly_wallet_id: watchonlyId })).status).toBe(201);
    expect((await admin.put(`/plans/${planId}`, { watchonly_wallet_id: null })).status).toBe(422);
    expect((await admin.put(`/plans/${planId}`, { watchonly_wallet_id: foreign.body.id })).status).toBe(404);
    expect((await admin.put(`/plans/${planId}`, { name: 'On-chain Gold (monthly)' })).status).toBe(200);
    expect((await client(stack.api).get(`/public/plan/${planId}`)).body.payment_methods).toEqual(['lightning', 'onchain']);
  });
});

describe('on-chain payments watched through Esplora', () => {
  const checkouts: Awaited<ReturnType<typeof subscribe>>[] = [];

  it('each payment gets the next receive address, never one twice: also across a restart and under concurrency', async () => {
    checkouts.push(await subscribe('first@example.com'));
    checkouts.push(await subscribe('second@example.com'));
    expect(checkouts.map((c) => c.onchain_address)).toEqual([ADDR_0, ADDR_1]);
    expect(checkouts[0]!.bip21_uri).toBe(`bitcoin:${ADDR_0}?amount=0.00050000`);
    expect(checkouts[0]!.expires_at - Math.floor(Date.now() / 1000)).toBeGreaterThan(23 * 3600);

    await stack.stopPayments();
    const before = stack.services.payments.child.pid;
    await stack.restartPayments();
    expect(stack.services.payments.child.pid).not.toBe(before);
    expect(stack.services.payments.child.exitCode).toBeNull();
    const key = parseExtendedKey(ZPUB);
    checkouts.push(await subscribe('third@example.com'));
    expect(checkouts[2]!.onchain_address).toBe(receiveAddress(key, 2));

    const together = await Promise.all(Array.from({ length: 4 }, (_, i) => subscribe(`together${i}@example.com`)));
    checkouts.push(...together);
    expect(new Set(together.map((c) => c.onchain_address))).toEqual(new Set([3, 4, 5, 6].map((i) => receiveAddress(key, i))));

    const rows = (
      await db.query(
        'SELECT id, onchain_address, derivation_index, watchonly_wallet_id, provider, provider_ref FROM payments.payments ORDER BY derivation_index',
      )
    ).rows;
    expect(rows.map((r) => r.derivation_index)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    for (const r of rows)
      expect(r).toMatchObject({
        watchonly_wallet_id: watchonlyId,
        provider: 'esplora',
        provider_ref: r.onchain_address,
        onchain_address: receiveAddress(key, r.derivation_index),
      });
    expect((await db.query('SELECT next_index FROM payments.watchonly_wallets WHERE id = $1', [watchonlyId])).rows[0].next_index).toBe(7);
  });

  it('underpaid stays pending, one confirmation of two stays pending, two confirm it once with its txid', async () => {
    const c = checkouts[0]!;
    esplora.pay(c.onchain_address, PRICE - 1);
    esplora.mine(3);
    await polled(c.onchain_address);
    expect((await paymentOf(c.payment_id)).status).toBe('pending');
    expect((await client(stack.api).get(`/public/payment/${c.payment_id}/status`)).body.status).toBe('pending');

    const topUp = esplora.pay(c.onchain_address, 1_000);
    esplora.mine(1);
    await polled(c.onchain_address);
    expect((await paymentOf(c.payment_id)).status).toBe('pending');
    expect((await subOf(c.subscription_id)).status).toBe('pending');

    esplora.mine(1);
    const paid = await until(
      () => paymentOf(c.payment_id),
      (p) => p.status === 'paid',
    );
    expect(paid).toMatchObject({ status: 'paid', payment_method: 'onchain', onchain_address: ADDR_0, onchain_txid: topUp, paid_at: expect.any(Number) });
    const sub = await until(
      () => subOf(c.subscription_id),
      (s) => s.status === 'active',
    );
    expect(sub).toMatchObject({ status: 'active', payment_method: 'onchain' });
    await appliedOnce(c);
    // The surplus (999 sats) is the owner's to settle with the payer; it is in the log.
    expect(stack.services.payments.lines.some((l) => l.includes('on-chain payment exceeds its amount') && l.includes('"surplus_sats":999'))).toBe(true);
    // More blocks and more sweeps change nothing.
    esplora.mine(2);
    await polled(checkouts[1]!.onchain_address);
    await appliedOnce(c);
  });

  it('a payment whose checkout expired is still watched, and recorded paid and applied when it confirms late', async () => {
    const c = checkouts[1]!;
    const now = (await admin.post('/dev/clock', {})).body.now as number;
    // Two days late: past the sweeper's general late window (one day), within the on-chain one (ONCHAIN_LATE_WINDOW_S, 7 days).
    expect((await admin.post('/dev/clock', { advance_seconds: c.expires_at - now + 2 * 86_400 })).status).toBe(200);
    expect(
      (
        await until(
          () => paymentOf(c.payment_id),
          (p) => p.status === 'expired',
        )
      ).status,
    ).toBe('expired');

    const txid = esplora.pay(c.onchain_address, PRICE);
    esplora.mine(2);
    const paid = await until(
      () => paymentOf(c.payment_id),
      (p) => p.status === 'paid',
    );
    expect(paid).toMatchObject({ status: 'paid', onchain_txid: txid });
    expect(
      (
        await until(
          () => subOf(c.subscription_id),
          (s) => s.status === 'active',
        )
      ).status,
    ).toBe('active');
    await appliedOnce(c);
  });

  it("another owner over the same key never gets an address this owner's payments hold, nor makes this owner's checkout fail", async () => {
    const key = parseExtendedKey(ZPUB);
    const stranger = client(stack.api, stack.wallets[1]!.admin_key);
    const theirs = (await stranger.get('/watchonly-wallets')).body.items.find((w: { key_type: string }) => w.key_type === 'zpub');
    const plan = await stranger.post('/plans', {
      name: 'Same key',
      amount_sats: PRICE,
      interval: 'monthly',
      allow_onchain: true,
      watchonly_wallet_id: theirs.id,
    });
    expect(plan.status, JSON.stringify(plan.body)).toBe(201);
    const held = new Set((await db.query('SELECT onchain_address FROM payments.payments')).rows.map((r) => r.onchain_address));
    // Their counter starts at 0: indexes this owner's payments hold are passed over (it failed with 500 before).
    const res = await client(stack.api).post('/public/subscribe', { plan_id: plan.body.id, payment_method: 'onchain', email: 'theirs@example.com' });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(held.has(res.body.onchain_address)).toBe(false);
    expect(res.body.onchain_address).toBe(receiveAddress(key, held.size));
    // And this owner's next checkout passes over the one theirs now holds.
    const mine = await subscribe('after-stranger@example.com');
    expect(mine.onchain_address).toBe(receiveAddress(key, held.size + 1));
  });

  it("an address the owner's own wallet used before is passed over: money already there pays no checkout (found from outside)", async () => {
    const key = parseExtendedKey(ZPUB);
    const { rows } = await db.query('SELECT next_index FROM payments.watchonly_wallets WHERE id = $1', [watchonlyId]);
    const at = rows[0].next_index as number;
    // The owner's wallet received money at the next two receive addresses before any checkout.
    esplora.pay(receiveAddress(key, at), 100_000_000);
    esplora.pay(receiveAddress(key, at + 1), PRICE);
    esplora.mine(6);
    const c = await subscribe('used-address@example.com');
    expect(c.onchain_address).toBe(receiveAddress(key, at + 2));
    await polled(c.onchain_address);
    expect((await paymentOf(c.payment_id)).status).toBe('pending');
    expect((await subOf(c.subscription_id)).status).toBe('pending');
    // Esplora away at checkout: 503, nothing handed out unchecked.
    esplora.faults.status = 500;
    try {
      const res = await client(stack.api).post('/public/subscribe', { plan_id: planId, payment_method: 'onchain', email: 'esplora-away@example.com' });
      expect(res.status, JSON.stringify(res.body)).toBe(503);
    } finally {
      esplora.faults.status = undefined;
    }
    // That failed checkout used up no index (found in review).
    expect((await subscribe('esplora-back@example.com')).onchain_address).toBe(receiveAddress(key, at + 3));
  });
});
