import { ID_PREFIXES, messages, type WatchonlyWallet } from '@sb/contracts';
import { answerOnce, conflict, messageHandler, newId, notFound, routeHandler, walletOf, invalid } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { InvalidExtendedKey, parseExtendedKey, receiveAddress } from '../domain/derivation.js';
import type { WatchonlyWalletRecord } from '../store/watchonly.repo.js';

/** The resource as the API shows it: never the key (it reveals every address of the wallet). */
function toWatchonlyWallet(r: WatchonlyWalletRecord): WatchonlyWallet {
  return {
    id: r.id,
    name: r.name,
    key_type: r.key_type,
    network: r.network,
    first_address: receiveAddress({ normalized: r.normalized_key, network: r.network }, 0),
    created_at: r.created_at,
  };
}

export const createWatchonlyWallet = (d: Deps) =>
  answerOnce(d.answered, d.db, 'watchonly_wallets.create', async (req, keep) => {
    const body = req.body;
    let key: ReturnType<typeof parseExtendedKey>;
    try {
      key = parseExtendedKey(body.xpub);
    } catch (err) {
      if (err instanceof InvalidExtendedKey) throw invalid(['xpub'], err.message);
      throw err;
    }
    const nowMs = d.clock.nowMs();
    return keep.write(d.db, async (q) => {
      const stored = await d.watchonly.insert(q, {
        id: newId(ID_PREFIXES.watchonly_wallet, nowMs),
        wallet_id: walletOf(req),
        name: body.name,
        xpub: body.xpub,
        normalized_key: key.normalized,
        key_type: key.key_type,
        network: key.network,
        next_index: 0,
        created_at: Math.floor(nowMs / 1000),
      });
      // Two wallets over one key would each count from index 0 and hand out the same addresses.
      if (!stored) throw conflict('You already registered this extended public key');
      return toWatchonlyWallet(stored);
    });
  });

export const listWatchonlyWallets = (d: Deps) =>
  routeHandler('watchonly_wallets.list', async (req) => {
    const { limit, offset } = req.query;
    const page = await d.watchonly.list(d.db, walletOf(req), limit, offset);
    return { ...page, items: page.items.map(toWatchonlyWallet) };
  });

export const getWatchonlyWallet = (d: Deps) =>
  routeHandler('watchonly_wallets.get', async (req) => {
    const w = await d.watchonly.get(d.db, walletOf(req), req.params.id);
    if (!w) throw notFound('Watch-only wallet');
    return toWatchonlyWallet(w);
  });

/** Billing checks a plan's watchonly_wallet_id with this before storing it. */
export const watchonlyWalletExists = (d: Deps) =>
  messageHandler(messages.watchonlyWalletExists, async (req) => ({ exists: !!(await d.watchonly.get(d.db, req.wallet_id, req.id)) }));
