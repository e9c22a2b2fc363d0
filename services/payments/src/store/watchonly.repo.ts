import type { Paginated } from '@sb/contracts';
import type { Queryable } from '@sb/runtime';
import type { KeyType, Network } from '../domain/derivation.js';

export interface WatchonlyWalletRecord {
  id: string;
  /** The owner. */
  wallet_id: string;
  name: string;
  /** As the owner gave it. */
  xpub: string;
  /** With xpub/tpub version bytes (what derivation reads); unique, so no two counters hand out one key's addresses. */
  normalized_key: string;
  key_type: KeyType;
  network: Network;
  /** The next receive index to hand out. */
  next_index: number;
  created_at: number;
}

const COLUMNS = 'id, wallet_id, name, xpub, normalized_key, key_type, network, next_index, created_at';

/** Watch-only wallets of owners; every owner read is scoped to the wallet, so a foreign id looks unknown. */
export class WatchonlyRepo {
  constructor(private readonly schema = 'payments') {}

  private get t() {
    return `${this.schema}.watchonly_wallets`;
  }

  /** Undefined when the key is already registered (by anyone). */
  async insert(q: Queryable, w: WatchonlyWalletRecord): Promise<WatchonlyWalletRecord | undefined> {
    const { rows } = await q.query<WatchonlyWalletRecord>(
      `INSERT INTO ${this.t} (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
       ON CONFLICT (wallet_id, normalized_key) DO NOTHING RETURNING ${COLUMNS}`,
      [w.id, w.wallet_id, w.name, w.xpub, w.normalized_key, w.key_type, w.network, w.next_index, w.created_at],
    );
    return rows[0];
  }

  async get(q: Queryable, walletId: string, id: string): Promise<WatchonlyWalletRecord | undefined> {
    const { rows } = await q.query<WatchonlyWalletRecord>(`SELECT ${COLUMNS} FROM ${this.t} WHERE id = $1 AND wallet_id = $2`, [id, walletId]);
    return rows[0];
  }

  /** Newest first, ties broken by id (ids sort by creation time). */
  async list(q: Queryable, walletId: string, limit: number, offset: number): Promise<Paginated<WatchonlyWalletRecord>> {
    const [items, count] = await Promise.all([
      q.query<WatchonlyWalletRecord>(`SELECT ${COLUMNS} FROM ${this.t} WHERE wallet_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3`, [
        walletId,
        limit,
        offset,
      ]),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.t} WHERE wallet_id = $1`, [walletId]),
    ]);
    return { items: items.rows, total: count.rows[0]?.n ?? 0, limit, offset };
  }

  /** The next receive index of the owner's watch-only wallet, not taken yet (see takeIndex). */
  async nextIndex(q: Queryable, walletId: string, id: string): Promise<{ normalized: string; network: Network; index: number } | undefined> {
    const { rows } = await q.query<{ normalized: string; network: Network; index: number }>(
      `SELECT normalized_key AS normalized, network, next_index AS "index" FROM ${this.t} WHERE id = $1 AND wallet_id = $2`,
      [id, walletId],
    );
    return rows[0];
  }

  /**
   * Takes receive index `index`, if it is still the next one: a compare-and-set, so concurrent callers
   * and replicas each get their own index, and a restart never hands one out again (an index whose
   * payment is then not stored is skipped, never reused). False: another caller took it first.
   */
  async takeIndex(q: Queryable, walletId: string, id: string, index: number): Promise<boolean> {
    const { rowCount } = await q.query(`UPDATE ${this.t} SET next_index = $3 + 1 WHERE id = $1 AND wallet_id = $2 AND next_index = $3`, [id, walletId, index]);
    return rowCount === 1;
  }
}
