import type { Auth, Caller } from '@sb/contracts';
import type { Queryable } from '@sb/runtime';
import { hashSecret, roleOf, type Role } from './domain/keys.js';
import type { WalletsRepo } from './store/wallets.repo.js';

export class AuthError extends Error {
  constructor(
    readonly status: 401 | 403,
    readonly detail: string,
  ) {
    super(detail);
  }
}

/** Resolves `X-Api-Key` to a wallet and role, with a short cache so a hot key costs no query per request. */
export class KeyResolver {
  private readonly cache = new Map<string, { wallet: string; role: Role; until: number }>();

  constructor(
    private readonly db: Queryable,
    private readonly wallets: WalletsRepo,
    private readonly ttlMs: number,
  ) {}

  async resolve(key: string): Promise<{ wallet: string; role: Role } | undefined> {
    const hash = hashSecret(key);
    const hit = this.cache.get(hash);
    if (hit && hit.until > Date.now()) return hit;
    const row = await this.wallets.findByKeyHash(this.db, hash);
    const role = row && roleOf(hash, row);
    if (!row || !role) {
      this.cache.delete(hash);
      return undefined;
    }
    const entry = { wallet: row.id, role, until: Date.now() + this.ttlMs };
    if (this.ttlMs > 0) {
      if (this.cache.size > 10_000) this.cache.clear();
      this.cache.set(hash, entry);
    }
    return entry;
  }

  /** The caller a route runs as, or an AuthError. The admin key is accepted wherever the invoice key is. */
  async callerFor(auth: Auth, headers: Record<string, string | string[] | undefined>): Promise<Caller> {
    if (auth === 'none') return {};
    if (auth === 'subscriber') {
      const token = header(headers, 'x-subscriber-token');
      if (!token) throw new AuthError(401, 'Invalid subscriber token');
      return { subscriber_token_hash: hashSecret(token) };
    }
    const key = header(headers, 'x-api-key');
    const found = key ? await this.resolve(key) : undefined;
    if (!found) throw new AuthError(401, 'Invalid API key');
    if (auth === 'admin' && found.role !== 'admin') throw new AuthError(403, 'Admin key required');
    return { wallet_id: found.wallet, role: found.role };
  }
}

function header(h: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = h[name];
  const s = Array.isArray(v) ? v[0] : v;
  return s && s.length <= 512 ? s : undefined;
}
