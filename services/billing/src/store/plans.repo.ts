import type { Paginated, Plan } from '@sb/contracts';
import { keyLookup, lockUntilCommit, type Queryable } from '@sb/runtime';

const COLUMNS = `id, wallet_id AS wallet, name, description, amount_sats, interval, trial_days, grace_period_days,
  allow_lightning, allow_onchain, allow_nwc, allow_cardproc, allow_walletproc, watchonly_wallet_id,
  cardproc_account_id, walletproc_merchant_id, created_at, updated_at, is_deleted`;

const WRITABLE = [
  'name',
  'description',
  'amount_sats',
  'interval',
  'trial_days',
  'grace_period_days',
  'allow_lightning',
  'allow_onchain',
  'allow_nwc',
  'allow_cardproc',
  'allow_walletproc',
  'watchonly_wallet_id',
  'cardproc_account_id',
  'walletproc_merchant_id',
  'updated_at',
  'is_deleted',
] as const;

/** The statements of the two hot paths, shared with the bench's floor program (bench/floor.mjs) so it runs exactly these. */
export const planSql = (schema: string) => ({
  get: keyLookup(`SELECT ${COLUMNS}, version FROM ${schema}.plans WHERE id = $1 AND wallet_id = $2`),
  insert: `INSERT INTO ${schema}.plans (id, wallet_id, created_at, ${WRITABLE.join(', ')})
       VALUES ($1, $2, $3, ${WRITABLE.map((_, i) => `$${i + 4}`).join(', ')})`,
  insertValues: (p: Plan) => [p.id, p.wallet, p.created_at, ...WRITABLE.map((c) => p[c] ?? null)],
});

/** Persistence of plans; every read is scoped to the wallet so a foreign id looks exactly like an unknown one. */
export class PlansRepo {
  /** Built once: the hot paths' statement texts were rebuilt on every call. */
  private readonly sql: ReturnType<typeof planSql>;
  private readonly getForUpdate: string;
  private readonly getPublicSql: string;

  constructor(private readonly schema = 'billing') {
    this.sql = planSql(schema);
    this.getForUpdate = `${this.sql.get} FOR UPDATE`;
    this.getPublicSql = keyLookup(`SELECT ${COLUMNS} FROM ${schema}.plans WHERE id = $1 AND NOT is_deleted`);
  }

  async insert(q: Queryable, p: Plan): Promise<void> {
    await q.query(this.sql.insert, this.sql.insertValues(p));
  }

  async get(q: Queryable, walletId: string, id: string, forUpdate = false): Promise<(Plan & { version: number }) | undefined> {
    const { rows } = await q.query(forUpdate ? this.getForUpdate : this.sql.get, [id, walletId]);
    return rows[0];
  }

  /**
   * Held until the transaction ends, shared by checkouts and exclusive for an archive, so that an archive
   * cancels every subscription a checkout adds to the plan, or the checkout sees the plan gone: a row
   * lock on the plan would write its row (and a MultiXact) at every checkout of a busy plan.
   */
  async lockForCheckout(q: Queryable, id: string): Promise<void> {
    await lockUntilCommit(q, 'billing.plans', id, true);
  }

  async lockForArchive(q: Queryable, id: string): Promise<void> {
    await lockUntilCommit(q, 'billing.plans', id);
  }

  async getPublic(q: Queryable, id: string): Promise<Plan | undefined> {
    const { rows } = await q.query(this.getPublicSql, [id]);
    return rows[0];
  }

  /** Whether a plan with this id exists and is archived (of any wallet: its id alone names it). */
  async archived(q: Queryable, id: string): Promise<boolean> {
    const { rows } = await q.query(`SELECT 1 FROM ${this.schema}.plans WHERE id = $1 AND is_deleted`, [id]);
    return rows.length > 0;
  }

  /** Compare-and-set on `version`: false when someone else changed the row first. */
  async update(q: Queryable, p: Plan, version: number, archivedAt?: number): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.schema}.plans SET ${WRITABLE.map((c, i) => `${c} = $${i + 4}`).join(', ')},
         archived_at = COALESCE($3, archived_at), version = version + 1
       WHERE id = $1 AND version = $2`,
      [p.id, version, archivedAt ?? null, ...WRITABLE.map((c) => p[c] ?? null)],
    );
    return rowCount === 1;
  }

  /** Newest first, ties broken by id (ids sort by creation time). */
  async list(q: Queryable, walletId: string, archived: boolean, limit: number, offset: number): Promise<Paginated<Plan>> {
    const [items, count] = await Promise.all([
      q.query(
        `SELECT ${COLUMNS} FROM ${this.schema}.plans WHERE wallet_id = $1 AND is_deleted = $2
         ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4`,
        [walletId, archived, limit, offset],
      ),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.schema}.plans WHERE wallet_id = $1 AND is_deleted = $2`, [walletId, archived]),
    ]);
    return { items: items.rows, total: count.rows[0]?.n ?? 0, limit, offset };
  }
}
