import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseExtendedKey, receiveAddress } from '../src/domain/derivation.js';
import type { PaymentRecord } from '../src/domain/payments.js';
import { ProviderUnavailableError } from '../src/providers/http.js';
import { esploraRail, type ReceiveAddresses } from '../src/providers/onchain.js';
import type { Rail, RailRequest } from '../src/providers/rail.js';
import { startEsploraServer, type EsploraServer } from './support/esplora-server.js';
import { startFakeServer } from './support/http-fake.js';

const ZPUB = 'zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1ADqtfSdVCToUG868RvUUkgDKf31mGDtKsAYz2oz2AGutZYs';
const key = parseExtendedKey(ZPUB);
const clock = { nowMs: () => 1_800_000_000_000 };
const logged: object[] = [];
let esplora: EsploraServer;
let rail: Rail;
let next = 0;

/** Addresses other payments hold (another owner registered the same key). */
const held = new Set<string>();
/** The owner `wal_a` has the watch-only wallet `wow_a`; indexes count up as the database's counter does. */
const ours = (walletId: string, id: string) => walletId === 'wal_a' && id === 'wow_a';
const addresses: ReceiveAddresses = {
  next: async (walletId, id) => (ours(walletId, id) ? { ...key, index: next } : undefined),
  take: async (walletId, id, index) => ours(walletId, id) && index === next && !!++next,
  inUse: async (address) => held.has(address),
};

beforeAll(async () => {
  esplora = await startEsploraServer('mainnet');
  rail = esploraRail({ url: esplora.url, confirmations: 2, timeoutMs: 2000, lateWindowS: 604_800, recheckAfterS: 60 }, addresses, clock, {
    info: (o: object) => logged.push(o),
  });
});
afterAll(() => esplora?.close());

const request = (plan: RailRequest['plan'], wallet_id = 'wal_a'): RailRequest => ({
  payment_id: 'pay_x',
  wallet_id,
  subscription_id: 'sub_x',
  plan_id: 'pln_x',
  amount_sats: 10_000,
  memo: 'Gold',
  expiry_seconds: 86_400,
  purpose: 'checkout',
  plan,
});
const payment = (address: string, amount_sats = 10_000) => ({ id: 'pay_x', amount_sats, onchain_address: address, provider_ref: address }) as PaymentRecord;

describe('on-chain rail over Esplora', () => {
  it("opens on the next receive address of the plan's watch-only wallet; no wallet or a foreign one is 422", async () => {
    const first = await rail.open(request({ watchonly_wallet_id: 'wow_a' }));
    const second = await rail.open(request({ watchonly_wallet_id: 'wow_a' }));
    expect(first).toEqual({
      provider_ref: 'bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu',
      onchain_address: 'bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu',
      expires_at: 1_800_000_000 + 86_400,
      watchonly_wallet_id: 'wow_a',
      derivation_index: 0,
    });
    expect(second).toMatchObject({ onchain_address: 'bc1qnjg0jd8228aq7egyzacy8cys3knf9xvrerkf9g', derivation_index: 1 });
    for (const plan of [{}, { watchonly_wallet_id: null }, { watchonly_wallet_id: 'wow_other' }]) {
      await expect(rail.open(request(plan))).rejects.toMatchObject({ kind: 'invalid', issues: [{ field: ['watchonly_wallet_id'] }] });
    }
    await expect(rail.open(request({ watchonly_wallet_id: 'wow_a' }, 'wal_b'))).rejects.toMatchObject({ kind: 'invalid' });
    expect(rail.lateWindowS).toBe(604_800);
  });

  it('passes over addresses other payments hold, a bounded number at a time, and goes on from there', async () => {
    const start = next;
    held.add(receiveAddress(key, start)).add(receiveAddress(key, start + 1));
    const opened = await rail.open(request({ watchonly_wallet_id: 'wow_a' }));
    expect(opened).toMatchObject({ derivation_index: start + 2, onchain_address: receiveAddress(key, start + 2) });
    expect(logged.splice(0)).toEqual([
      { watchonly_wallet_id: 'wow_a', derivation_index: start },
      { watchonly_wallet_id: 'wow_a', derivation_index: start + 1 },
    ]);
    // Squatted far ahead: 503 after 51 indexes, and the retry starts past them.
    for (let i = 3; i < 3 + 60; i++) held.add(receiveAddress(key, start + i));
    await expect(rail.open(request({ watchonly_wallet_id: 'wow_a' }))).rejects.toBeInstanceOf(ProviderUnavailableError);
    expect(next).toBe(start + 3 + 51);
    const after = await rail.open(request({ watchonly_wallet_id: 'wow_a' }));
    expect(after.derivation_index).toBe(start + 63);
    logged.splice(0);
  });

  it("passes over addresses the owner's wallet used before: money already there pays no payment (found from outside)", async () => {
    const start = next;
    esplora.pay(receiveAddress(key, start), 100_000_000);
    esplora.mine(6);
    esplora.pay(receiveAddress(key, start + 1), 10_000); // in the mempool only: used all the same
    const opened = await rail.open(request({ watchonly_wallet_id: 'wow_a' }));
    expect(opened).toMatchObject({ derivation_index: start + 2, onchain_address: receiveAddress(key, start + 2) });
    expect(logged.splice(0)).toEqual([
      { watchonly_wallet_id: 'wow_a', derivation_index: start, transactions: 1 },
      { watchonly_wallet_id: 'wow_a', derivation_index: start + 1, transactions: 1 },
    ]);
    expect(await rail.status!(payment(opened.onchain_address!))).toEqual({ paid: false });
    // Esplora away: no address is handed out unchecked, and none is used up (found in review: each
    // failed try took an index, past the wallet's gap limit in minutes).
    esplora.faults.status = 500;
    for (let i = 0; i < 3; i++) await expect(rail.open(request({ watchonly_wallet_id: 'wow_a' }))).rejects.toBeInstanceOf(ProviderUnavailableError);
    esplora.faults.status = undefined;
    expect(await rail.open(request({ watchonly_wallet_id: 'wow_a' }))).toMatchObject({ derivation_index: start + 3 });
  });

  it('opens of one watch-only wallet at once each ask Esplora about one address (review: all asked about the same one, again and again)', async () => {
    const start = next;
    const before = esplora.requests.length;
    const opened = await Promise.all(Array.from({ length: 8 }, () => rail.open(request({ watchonly_wallet_id: 'wow_a' }))));
    expect(opened.map((o) => o.derivation_index).sort((a, b) => a! - b!)).toEqual([0, 1, 2, 3, 4, 5, 6, 7].map((i) => start + i));
    expect(esplora.requests.slice(before).map((r) => r.path)).toHaveLength(8);
    expect(new Set(esplora.requests.slice(before).map((r) => r.path)).size).toBe(8);
  });

  it('paid only by confirmed outputs to the address adding up to the amount with enough confirmations', async () => {
    const address = receiveAddress(key, 100);
    const p = payment(address);
    expect(await rail.status!(p)).toEqual({ paid: false });
    const paths = esplora.requests.slice(-2).map((r) => r.path);
    expect(paths).toEqual([`/address/${address}/txs`, '/blocks/tip/height']);
    expect(esplora.requests.at(-1)!.headers['x-api-key']).toBeUndefined();

    const a = esplora.pay(address, 6_000);
    const b = esplora.pay(address, 4_000);
    expect(await rail.status!(p)).toEqual({ paid: false }); // in the mempool
    esplora.mine();
    expect(await rail.status!(p)).toEqual({ paid: false }); // one confirmation of two
    esplora.mine();
    const paid = await rail.status!(p);
    expect(paid.paid).toBe(true);
    expect([a, b]).toContain(paid.onchain_txid);
    expect(logged).toEqual([]);
  });

  it('underpaid stays unpaid; the transaction that completes it is reported; a surplus is logged', async () => {
    const address = receiveAddress(key, 101);
    const p = payment(address);
    esplora.pay(address, 9_999);
    esplora.mine(5);
    expect(await rail.status!(p)).toEqual({ paid: false });
    const topUp = esplora.pay(address, 2_000);
    esplora.mine();
    expect(await rail.status!(p)).toEqual({ paid: false });
    esplora.mine();
    expect(await rail.status!(p)).toEqual({ paid: true, onchain_txid: topUp });
    expect(logged.at(-1)).toMatchObject({ payment_id: 'pay_x', address, amount_sats: 10_000, received_sats: 11_999, surplus_sats: 1_999 });
  });

  it('reads past the first 25 confirmed transactions (Esplora pages them)', async () => {
    const address = receiveAddress(key, 102);
    const txids: string[] = [];
    for (let i = 0; i < 30; i++) {
      txids.push(esplora.pay(address, 100));
      esplora.mine();
    }
    esplora.mine();
    expect(await rail.status!(payment(address, 2_900))).toEqual({ paid: true, onchain_txid: txids[28] });
    expect(esplora.requests.some((r) => r.path.startsWith(`/address/${address}/txs/chain/`))).toBe(true);
    expect(await rail.status!(payment(address, 3_001))).toEqual({ paid: false });
  });

  it('an Esplora error, a malformed answer or no answer in time is ProviderUnavailableError (503)', async () => {
    const address = receiveAddress(key, 103);
    esplora.faults.status = 500;
    await expect(rail.status!(payment(address))).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/esplora GET .*HTTP 500/) });
    esplora.faults.status = undefined;
    await expect(rail.status!(payment('bc1qnotanaddress'))).rejects.toBeInstanceOf(ProviderUnavailableError);
    const wrongApi = esploraRail({ url: `${esplora.url}/blocks`, confirmations: 1, timeoutMs: 2000, lateWindowS: 0, recheckAfterS: 60 }, addresses, clock, {
      info: () => undefined,
    });
    await expect(wrongApi.status!(payment(address))).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/HTTP 404/) });
    // Something answering 200 with other JSON (a misconfigured ESPLORA_URL) is not a list of transactions.
    const other = await startFakeServer((r) => ({
      status: 200,
      body: r.path.endsWith('/txs') ? { txs: [] } : [{ txid: 'x', vout: [{ value: '1' }], status: {} }],
    }));
    try {
      const misconfigured = esploraRail({ url: other.url, confirmations: 1, timeoutMs: 2000, lateWindowS: 0, recheckAfterS: 60 }, addresses, clock, {
        info: () => undefined,
      });
      await expect(misconfigured.status!(payment(address))).rejects.toMatchObject({
        kind: 'unavailable',
        reason: expect.stringMatching(/not a list of transactions/),
      });
    } finally {
      await other.close();
    }
    esplora.faults.delayMs = 3000;
    await expect(rail.status!(payment(address))).rejects.toMatchObject({ kind: 'unavailable', reason: expect.stringMatching(/no answer within 2000 ms/) });
    esplora.faults.delayMs = undefined;
  });
});
