import { ID_PREFIXES } from '@sb/contracts';
import type { Queryable } from '@sb/runtime/db';
import { newId } from '@sb/runtime/ids';
import { generateKey, hashSecret } from '../domain/keys.js';

export interface WalletKeys {
  id: string;
  name: string;
  admin_key: string;
  invoice_key: string;
}
interface WalletRow {
  id: string;
  name: string;
  created_at: number;
  keys_rotated_at: number | null;
}

/** Wallets and their key hashes; a key itself exists only in the return value of create and rotate. */
export class WalletsRepo {
  constructor(private readonly schema = 'gateway') {}

  async create(q: Queryable, name: string): Promise<WalletKeys> {
    const id = newId(ID_PREFIXES.wallet);
    const admin_key = generateKey();
    const invoice_key = generateKey();
    await q.query(`INSERT INTO ${this.schema}.wallets (id, name, admin_key_hash, invoice_key_hash, created_at) VALUES ($1, $2, $3, $4, $5)`, [
      id,
      name,
      hashSecret(admin_key),
      hashSecret(invoice_key),
      Math.floor(Date.now() / 1000),
    ]);
    return { id, name, admin_key, invoice_key };
  }

  async rotate(q: Queryable, id: string): Promise<WalletKeys | undefined> {
    const admin_key = generateKey();
    const invoice_key = generateKey();
    const { rows } = await q.query<{ name: string }>(
      `UPDATE ${this.schema}.wallets SET admin_key_hash = $2, invoice_key_hash = $3, keys_rotated_at = $4 WHERE id = $1 RETURNING name`,
      [id, hashSecret(admin_key), hashSecret(invoice_key), Math.floor(Date.now() / 1000)],
    );
    return rows[0] ? { id, name: rows[0].name, admin_key, invoice_key } : undefined;
  }

  async list(q: Queryable): Promise<WalletRow[]> {
    const { rows } = await q.query<WalletRow>(`SELECT id, name, created_at, keys_rotated_at FROM ${this.schema}.wallets ORDER BY created_at, id`);
    return rows;
  }

  /** A wallet's name (undefined: no such wallet). */
  async nameOf(q: Queryable, id: string): Promise<string | undefined> {
    const { rows } = await q.query<{ name: string }>(`SELECT name FROM ${this.schema}.wallets WHERE id = $1`, [id]);
    return rows[0]?.name;
  }

  async findByKeyHash(q: Queryable, hash: string): Promise<{ id: string; admin_key_hash: string; invoice_key_hash: string } | undefined> {
    const { rows } = await q.query(
      `SELECT id, admin_key_hash, invoice_key_hash FROM ${this.schema}.wallets WHERE admin_key_hash = $1 OR invoice_key_hash = $1`,
      [hash],
    );
    return rows[0];
  }
}
