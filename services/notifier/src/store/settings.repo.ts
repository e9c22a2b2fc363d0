import { lockUntilCommit, type Queryable } from '@sb/runtime';
import type { StoredSettings } from '../domain/settings.js';

/** '' is the wallet's own row; a plan id names that plan's. */
export const WALLET_ROW = '';

export interface SettingsRow {
  wallet_id: string;
  plan_id: string;
  inherit: boolean;
  config: StoredSettings | null;
  secrets_sealed: string | null;
  updated_at: number;
  /** The wallet's own merchant name, read with the row (a plan's override may leave it out). */
  wallet_merchant_name?: string | null;
}

export class SettingsRepo {
  constructor(private readonly schema: string) {}

  /** The wallet's merchant name beside a row `s` of the settings table. */
  private get walletName(): string {
    return `(SELECT w.config->>'merchant_name' FROM ${this.schema}.settings w WHERE w.wallet_id = s.wallet_id AND w.plan_id = '') AS wallet_merchant_name`;
  }

  async get(q: Queryable, walletId: string, planId: string): Promise<SettingsRow | undefined> {
    const { rows } = await q.query<SettingsRow>(
      `SELECT s.wallet_id, s.plan_id, s.inherit, s.config, s.secrets_sealed, s.updated_at, ${this.walletName}
         FROM ${this.schema}.settings s WHERE s.wallet_id = $1 AND s.plan_id = $2`,
      [walletId, planId],
    );
    return rows[0];
  }

  /** Held until the transaction ends: one settings change of a wallet at a time (its pending notices' routes follow each). */
  async lockWallet(q: Queryable, walletId: string): Promise<void> {
    await lockUntilCommit(q, `${this.schema}.settings`, walletId);
  }

  async put(q: Queryable, r: SettingsRow): Promise<void> {
    await q.query(
      `INSERT INTO ${this.schema}.settings (wallet_id, plan_id, inherit, config, secrets_sealed, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (wallet_id, plan_id) DO UPDATE SET inherit = EXCLUDED.inherit, config = EXCLUDED.config, secrets_sealed = EXCLUDED.secrets_sealed, updated_at = EXCLUDED.updated_at`,
      [r.wallet_id, r.plan_id, r.inherit, r.config === null ? null : JSON.stringify(r.config), r.secrets_sealed, r.updated_at],
    );
  }

  /** The row that applies to a plan's notices: its own override, else the wallet's (undefined: defaults). */
  async effective(q: Queryable, walletId: string, planId: string | undefined): Promise<SettingsRow | undefined> {
    const { rows } = await q.query<SettingsRow>(
      `SELECT s.wallet_id, s.plan_id, s.inherit, s.config, s.secrets_sealed, s.updated_at, ${this.walletName} FROM ${this.schema}.settings s
        WHERE s.wallet_id = $1 AND (s.plan_id = '' OR (s.plan_id = $2 AND NOT s.inherit)) ORDER BY s.plan_id DESC LIMIT 1`,
      [walletId, planId ?? ''],
    );
    return rows[0];
  }

  /**
   * `effective` for many (wallet, plan) pairs in one statement: a row or undefined per pair, in their
   * order, with the wallet's own merchant name (a plan's override may leave it out).
   */
  async effectiveMany(q: Queryable, keys: { walletId: string; planId: string | undefined }[]): Promise<(SettingsRow | undefined)[]> {
    const { rows } = await q.query<SettingsRow & { i: number }>(
      `SELECT DISTINCT ON (k.i) k.i::int AS i, s.wallet_id, s.plan_id, s.inherit, s.config, s.secrets_sealed, s.updated_at, ${this.walletName}
         FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(wallet_id, plan_id, i)
         JOIN ${this.schema}.settings s ON s.wallet_id = k.wallet_id AND (s.plan_id = '' OR (s.plan_id = k.plan_id AND NOT s.inherit))
        ORDER BY k.i, s.plan_id DESC`,
      [keys.map((k) => k.walletId), keys.map((k) => k.planId ?? '')],
    );
    const out: (SettingsRow | undefined)[] = keys.map(() => undefined);
    for (const { i, ...row } of rows) out[i - 1] = row;
    return out;
  }
}
