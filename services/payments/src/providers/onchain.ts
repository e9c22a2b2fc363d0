import { unixSeconds, type Clock, type Logger, invalid } from '@sb/runtime';
import type { PaymentRecord } from '../domain/payments.js';
import { receiveAddress, type Network } from '../domain/derivation.js';
import { fetchJson, ProviderUnavailableError } from './http.js';
import type { OpenedPayment, ProviderStatus, Rail, RailRequest } from './rail.js';
import { urlSetting } from './http.js';

interface EsploraSettings {
  /** Base of an Esplora-compatible HTTP API (Blockstream's esplora, mempool.space, electrs). */
  url: string;
  /** Blocks a transaction must be buried under, counting its own, before it counts as paid. */
  confirmations: number;
  timeoutMs: number;
  /** How long after expiry the sweeper still watches an address: transactions can confirm late. */
  lateWindowS: number;
  recheckAfterS: number;
}

/**
 * Where receive addresses come from: the index counter of an owner's watch-only wallet (`next`: its next
 * index, undefined when the owner has no such wallet; `take`: takes that index for good unless another
 * caller took it first), and whether a payment (of any owner) already has an address.
 */
export interface ReceiveAddresses {
  next: (walletId: string, watchonlyId: string) => Promise<{ normalized: string; network: Network; index: number } | undefined>;
  take: (walletId: string, watchonlyId: string, index: number) => Promise<boolean>;
  inUse: (address: string) => Promise<boolean>;
}

/**
 * Indexes one payment may pass over because their address is taken: used before (by the owner's own
 * wallet), or held by a payment. Two owners may register the same key (a key is not proof of ownership,
 * and refusing the second would let whoever knows a key squat it), each with its own counter, so one
 * counter can reach addresses the other's payments hold. Each skip advances the counter for good, so a
 * retry after this many goes on from there.
 */
const MAX_SKIPPED_ADDRESSES = 50;
/** Indexes one payment may see taken by other callers between looking and taking (many checkouts at once). */
const MAX_LOST_TAKES = 100;

/** An Esplora transaction, only what is read here. */
export interface EsploraTx {
  txid: string;
  vout: { scriptpubkey_address?: string; value: number }[];
  status: { confirmed: boolean; block_height?: number };
}

/** Esplora answers at most this many confirmed transactions per page (`/txs`, `/txs/chain/:last_seen`). */
const CHAIN_PAGE = 25;
/** A payment address holds one or a few transactions; this many pages is plenty and bounds dust spam. */
const MAX_PAGES = 20;

const unprocessablePlan = (msg: string) => invalid(['watchonly_wallet_id'], msg, 'value_error');

// biome-ignore lint/suspicious/noExplicitAny: this guard is what turns Esplora's JSON into a typed value.
function isTx(t: any): t is EsploraTx {
  return (
    typeof t?.txid === 'string' &&
    Array.isArray(t.vout) &&
    t.vout.every((o: { value?: unknown } | null) => Number.isSafeInteger(o?.value)) &&
    typeof t.status?.confirmed === 'boolean' &&
    (!t.status.confirmed || Number.isSafeInteger(t.status.block_height))
  );
}

/**
 * Sums what confirmed transactions pay to `address`, oldest block first, and says whether it covers
 * `amount`; the transaction that brought the sum there is the one reported.
 */
function settleAddress(
  txs: EsploraTx[],
  address: string,
  amount: number,
  tip: number,
  confirmations: number,
): { paid: boolean; received: number; txid?: string } {
  const deep = txs
    .filter((t) => t.status.confirmed && tip - t.status.block_height! + 1 >= confirmations)
    .sort((a, b) => a.status.block_height! - b.status.block_height!)
    .map((t) => ({ txid: t.txid, value: t.vout.filter((o) => o.scriptpubkey_address === address).reduce((v, o) => v + o.value, 0) }));
  const received = deep.reduce((v, t) => v + t.value, 0);
  let sum = 0;
  const completing = deep.find((t) => (sum += t.value) >= amount);
  return completing ? { paid: true, received, txid: completing.txid } : { paid: false, received };
}

/**
 * On-chain to the owner's own wallet, watched through an Esplora HTTP API: each payment gets a fresh
 * receive address of the plan's watch-only wallet (an index is never handed out twice, one with any
 * transaction is passed over: Esplora must answer at checkout), and is paid once
 * confirmed transactions to it add up to the amount with enough confirmations. No callbacks: the sweeper
 * asks `status` for open payments, and for expired ones during `lateWindowS` (a late payment still counts).
 */
export function esploraRail(s: EsploraSettings, addresses: ReceiveAddresses, clock: Clock, log: Pick<Logger, 'info'>): Rail {
  const get = (path: string) => fetchJson('esplora', `${s.url}${path}`, { method: 'GET', timeoutMs: s.timeoutMs });

  /** The transactions to or from `address`, at most `pages` pages of confirmed ones. */
  async function transactions(address: string, pages = MAX_PAGES): Promise<EsploraTx[]> {
    const path = `/address/${encodeURIComponent(address)}/txs`;
    const byId = new Map<string, EsploraTx>();
    let page: unknown = await get(path);
    for (let n = 0; ; n++) {
      if (!Array.isArray(page) || !page.every(isTx)) throw new ProviderUnavailableError(`esplora GET ${path}: answer is not a list of transactions`);
      for (const t of page) byId.set(t.txid, t);
      const confirmed = page.filter((t) => t.status.confirmed);
      if (confirmed.length < CHAIN_PAGE || n + 1 >= pages) return [...byId.values()];
      page = await get(`${path}/chain/${confirmed[confirmed.length - 1]!.txid}`);
    }
  }

  /**
   * One open at a time per watch-only wallet in this process: concurrent ones (a renewal batch opens 16)
   * would each look at the same address and all but one look again (found in review: 136 Esplora calls
   * for 16 addresses). Replicas still race; the compare-and-set settles that.
   */
  const openings = new Map<string, Promise<unknown>>();
  function oneAtATime<T>(key: string, f: () => Promise<T>): Promise<T> {
    const run = (openings.get(key) ?? Promise.resolve()).then(f);
    const tail = run.catch(() => undefined);
    openings.set(key, tail);
    void tail.then(() => openings.get(key) === tail && openings.delete(key));
    return run;
  }

  /** The next receive address of watch-only wallet `id` nobody used or holds, its index taken for good. */
  async function fresh(req: RailRequest, id: string): Promise<OpenedPayment> {
    // Another caller taking the index looked at (a lost compare-and-set) is no skip: the next one is looked at.
    for (let skipped = 0, lost = 0; skipped <= MAX_SKIPPED_ADDRESSES && lost <= MAX_LOST_TAKES; ) {
      const key = await addresses.next(req.wallet_id, id);
      if (!key) throw unprocessablePlan('watchonly_wallet_id names no watch-only wallet of this wallet');
      const address = receiveAddress(key, key.index);
      const held = await addresses.inUse(address);
      // The owner's own wallet hands out the same addresses: money it received at one before this payment
      // would count as this payment's (found from outside: a checkout paid at once by the owner's old
      // funds). A used address is passed over, as wallets pass over used addresses. Asked before the
      // index is taken: Esplora away takes none (found in review: each failed checkout or renewal retry
      // took one, past the wallet's gap limit in minutes).
      const used = held ? 0 : (await transactions(address, 1)).length;
      if (!(await addresses.take(req.wallet_id, id, key.index))) {
        lost++;
        continue;
      }
      if (held || used) {
        skipped++;
        log.info(
          { watchonly_wallet_id: id, derivation_index: key.index, ...(used ? { transactions: used } : {}) },
          held ? 'receive address held by another payment (the key is registered twice): skipped' : 'receive address used before: skipped',
        );
        continue;
      }
      return {
        provider_ref: address,
        onchain_address: address,
        expires_at: unixSeconds(clock) + req.expiry_seconds,
        watchonly_wallet_id: id,
        derivation_index: key.index,
      };
    }
    throw new ProviderUnavailableError(`no unused receive address could be taken from watch-only wallet ${id} just now; retry`);
  }

  return {
    method: 'onchain',
    provider: 'esplora',
    needsFiat: false,
    lateWindowS: s.lateWindowS,
    recheckAfterS: s.recheckAfterS,
    async open(req) {
      const id = req.plan.watchonly_wallet_id;
      if (!id) throw unprocessablePlan("On-chain payments of this plan need a watch-only wallet: set the plan's watchonly_wallet_id");
      return oneAtATime(`${req.wallet_id}/${id}`, () => fresh(req, id));
    },
    async status(p: PaymentRecord): Promise<ProviderStatus> {
      const address = p.onchain_address ?? p.provider_ref!;
      const txs = await transactions(address);
      const tip = await get('/blocks/tip/height');
      if (!Number.isSafeInteger(tip) || tip < 0) throw new ProviderUnavailableError('esplora GET /blocks/tip/height: answer is not a block height');
      const r = settleAddress(txs, address, p.amount_sats, tip, s.confirmations);
      if (!r.paid) return { paid: false };
      if (r.received > p.amount_sats) {
        // Nothing is refunded automatically: the owner sees the surplus here and settles it with the payer.
        log.info(
          { payment_id: p.id, address, amount_sats: p.amount_sats, received_sats: r.received, surplus_sats: r.received - p.amount_sats },
          'on-chain payment exceeds its amount',
        );
      }
      return { paid: true, onchain_txid: r.txid! };
    },
  };
}

/** Esplora (ONCHAIN_PROVIDER=esplora): its settings, gathered into the payments configuration by the registry. */
export const esploraSettings = {
  /** Esplora-compatible HTTP API watched for payments to owners' watch-only wallets (ONCHAIN_PROVIDER=esplora). */
  ESPLORA_URL: urlSetting.optional(),
};
