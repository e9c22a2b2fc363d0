import type { Paginated } from '@sb/contracts';
import { keyLookup, type Queryable } from '@sb/runtime';

interface SubscriberRow {
  id: string;
  wallet_id: string;
  email: string | null;
  name: string | null;
  messenger: string | null;
  nostr: string | null;
  contact_preference: 'email' | 'messenger' | 'nostr' | null;
  token_hash: string;
  token_sealed: string;
  created_at: number;
}

const COLS = 'id, wallet_id, email, name, messenger, nostr, token_hash, token_sealed, created_at, contact_preference';

export const publicSubscriber = (r: SubscriberRow) => ({
  id: r.id,
  email: r.email,
  messenger: r.messenger,
  nostr: r.nostr,
  name: r.name,
  created_at: r.created_at,
});

export class SubscribersRepo {
  private readonly getSql: string;
  private readonly byTokenSql: string;

  constructor(private readonly schema = 'billing') {
    this.getSql = keyLookup(`SELECT ${COLS} FROM ${schema}.subscribers WHERE id = $1 AND wallet_id = $2`);
    this.byTokenSql = keyLookup(`SELECT ${COLS} FROM ${schema}.subscribers WHERE token_hash = $1`);
  }

  /**
   * One subscriber per (wallet, email): an existing one is returned with `created` false (and keeps its
   * token); without an email every checkout makes a new subscriber.
   */
  async upsert(q: Queryable, r: SubscriberRow): Promise<{ row: SubscriberRow; created: boolean }> {
    const ins = await q.query<SubscriberRow>(
      `INSERT INTO ${this.schema}.subscribers (${COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)
       ON CONFLICT (wallet_id, lower(email)) WHERE email IS NOT NULL DO NOTHING RETURNING ${COLS}`,
      [r.id, r.wallet_id, r.email, r.name, r.messenger, r.nostr, r.token_hash, r.token_sealed, r.created_at, r.contact_preference],
    );
    if (ins.rows[0]) return { row: ins.rows[0], created: true };
    const { rows } = await q.query<SubscriberRow>(`SELECT ${COLS} FROM ${this.schema}.subscribers WHERE wallet_id = $1 AND lower(email) = lower($2)`, [
      r.wallet_id,
      r.email,
    ]);
    return { row: rows[0]!, created: false };
  }

  async byEmail(q: Queryable, walletId: string, email: string): Promise<SubscriberRow | undefined> {
    const { rows } = await q.query<SubscriberRow>(`SELECT ${COLS} FROM ${this.schema}.subscribers WHERE wallet_id = $1 AND lower(email) = lower($2)`, [
      walletId,
      email,
    ]);
    return rows[0];
  }

  async get(q: Queryable, walletId: string, id: string): Promise<SubscriberRow | undefined> {
    const { rows } = await q.query<SubscriberRow>(this.getSql, [id, walletId]);
    return rows[0];
  }

  async byTokenHash(q: Queryable, hash: string): Promise<SubscriberRow | undefined> {
    const { rows } = await q.query<SubscriberRow>(this.byTokenSql, [hash]);
    return rows[0];
  }

  /** Newest first; `search` matches email, name, messenger and nostr case-insensitively; `planId` limits to its subscribers. */
  async list(q: Queryable, walletId: string, opts: { search?: string; planId?: string }, limit: number, offset: number): Promise<Paginated<SubscriberRow>> {
    const where = ['s.wallet_id = $1'];
    const args: unknown[] = [walletId];
    if (opts.search) {
      const p = `$${args.push(`%${opts.search.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)}`;
      where.push(`(s.email ILIKE ${p} OR s.name ILIKE ${p} OR s.messenger ILIKE ${p} OR s.nostr ILIKE ${p})`);
    }
    if (opts.planId)
      where.push(`EXISTS (SELECT 1 FROM ${this.schema}.subscriptions x WHERE x.subscriber_id = s.id AND x.plan_id = $${args.push(opts.planId)})`);
    const w = where.join(' AND ');
    const [items, count] = await Promise.all([
      q.query<SubscriberRow>(
        `SELECT ${COLS.split(', ')
          .map((c) => `s.${c}`)
          .join(', ')} FROM ${this.schema}.subscribers s WHERE ${w} ORDER BY s.created_at DESC, s.id DESC LIMIT ${limit} OFFSET ${offset}`,
        args,
      ),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.schema}.subscribers s WHERE ${w}`, args),
    ]);
    return { items: items.rows, total: count.rows[0]?.n ?? 0, limit, offset };
  }
}
