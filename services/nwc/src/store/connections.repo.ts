import type { NWCConnection, NWCErrorCode, Paginated } from '@sb/contracts';
import { lockUntilCommit, type Queryable } from '@sb/runtime';
import type { Encryption } from '../nip47.js';

/** A stored connection: the contract's NWCConnection plus what this service needs to pay with it. */
export interface ConnectionRow extends NWCConnection {
  wallet_id: string;
  subscription_id: string;
  plan_id: string;
  plan_name: string;
  relays: string[];
  secret_sealed: string | null;
  encryption: Encryption;
  last_error_code: NWCErrorCode | null;
  disconnected_at: number | null;
  subscriber_email: string | null;
  subscriber_name: string | null;
}

const COLS = `id, wallet_id, subscriber_id, subscription_id, plan_id, plan_name, wallet_pubkey, relay_url, relays, secret_sealed,
  encryption, max_amount_sats, is_active, last_used_at, last_error, last_error_code, consecutive_failures, created_at, updated_at,
  disconnected_at, subscriber_email, subscriber_name`;
const INSERTED = COLS.split(',').map((c) => c.trim());

/** The contract's view of a row: never the secret. */
export function toConnection(r: ConnectionRow): NWCConnection {
  return {
    id: r.id,
    subscriber_id: r.subscriber_id,
    wallet_pubkey: r.wallet_pubkey,
    relay_url: r.relay_url,
    max_amount_sats: r.max_amount_sats,
    is_active: r.is_active,
    last_used_at: r.last_used_at,
    last_error: r.last_error,
    consecutive_failures: r.consecutive_failures,
    created_at: r.created_at,
    updated_at: r.updated_at,
  };
}

export class ConnectionsRepo {
  constructor(private readonly schema = 'nwc') {}

  private get t() {
    return `${this.schema}.connections`;
  }

  async insert(q: Queryable, r: ConnectionRow): Promise<void> {
    await q.query(
      `INSERT INTO ${this.t} (${INSERTED.join(', ')}) VALUES (${INSERTED.map((_, i) => `$${i + 1}`).join(', ')})`,
      INSERTED.map((c) => (r as unknown as Record<string, unknown>)[c]),
    );
  }

  /** The connection paying for a subscription, if one is active (the newest). */
  async activeForSubscription(q: Queryable, walletId: string, subscriptionId: string): Promise<ConnectionRow | undefined> {
    const { rows } = await q.query<ConnectionRow>(
      `SELECT ${COLS} FROM ${this.t} WHERE wallet_id = $1 AND subscription_id = $2 AND is_active ORDER BY created_at DESC, id DESC LIMIT 1`,
      [walletId, subscriptionId],
    );
    return rows[0];
  }

  async get(q: Queryable, id: string, forUpdate = false): Promise<ConnectionRow | undefined> {
    const { rows } = await q.query<ConnectionRow>(`SELECT ${COLS} FROM ${this.t} WHERE id = $1${forUpdate ? ' FOR UPDATE' : ''}`, [id]);
    return rows[0];
  }

  /**
   * The subscription's active connection to `walletPubkey` that a request with the (hashed) Idempotency-Key
   * `requestKey` charged: that request again (its answer lost) is answered with it, not a new one.
   */
  async activeOfRequest(
    q: Queryable,
    walletId: string,
    subscriptionId: string,
    wallet: { pubkey: string; max_amount_sats: number | null },
    requestKey: string,
  ): Promise<ConnectionRow | undefined> {
    // Its limit too: a key the gateway freed may come back with another body (found in review).
    const { rows } = await q.query<ConnectionRow>(
      `SELECT ${COLS} FROM ${this.t} c WHERE wallet_id = $1 AND subscription_id = $2 AND wallet_pubkey = $3 AND is_active
         AND max_amount_sats IS NOT DISTINCT FROM $5
         AND EXISTS (SELECT 1 FROM ${this.schema}.charge_attempts a WHERE a.connection_id = c.id AND a.request_key = $4)
       ORDER BY created_at DESC, id DESC LIMIT 1`,
      [walletId, subscriptionId, wallet.pubkey, requestKey, wallet.max_amount_sats],
    );
    return rows[0];
  }

  /** Newest first, ties broken by id (ids sort by creation time). */
  async listOfSubscriber(q: Queryable, walletId: string, subscriberId: string, limit: number, offset: number): Promise<Paginated<ConnectionRow>> {
    const [items, count] = await Promise.all([
      q.query<ConnectionRow>(`SELECT ${COLS} FROM ${this.t} WHERE wallet_id = $1 AND subscriber_id = $2 ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4`, [
        walletId,
        subscriberId,
        limit,
        offset,
      ]),
      q.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.t} WHERE wallet_id = $1 AND subscriber_id = $2`, [walletId, subscriberId]),
    ]);
    return { items: items.rows, total: count.rows[0]?.n ?? 0, limit, offset };
  }

  /** Disconnect by its subscriber: inactive, secret wiped. Undefined when it is not theirs (or unknown). Idempotent. */
  /**
   * Held until the transaction ends: connecting wallets for one subscription one at a time, so that each
   * retires the one before it (two at once each saw none to retire, and both stayed active).
   */
  async lockSubscription(q: Queryable, subscriptionId: string): Promise<void> {
    await lockUntilCommit(q, 'nwc.connections', subscriptionId);
  }

  /** The subscription's earlier connections are retired when a new wallet is connected for it (a retried checkout). */
  async retireForSubscription(q: Queryable, walletId: string, subscriptionId: string, now: number): Promise<void> {
    await q.query(
      `UPDATE ${this.t} SET is_active = false, secret_sealed = NULL, disconnected_at = COALESCE(disconnected_at, $3), updated_at = $3
       WHERE wallet_id = $1 AND subscription_id = $2 AND is_active`,
      [walletId, subscriptionId, now],
    );
  }

  async disconnect(q: Queryable, walletId: string, subscriberId: string, id: string, now: number): Promise<ConnectionRow | undefined> {
    const { rows } = await q.query<ConnectionRow>(
      `UPDATE ${this.t} SET is_active = false, secret_sealed = NULL, disconnected_at = COALESCE(disconnected_at, $4), updated_at = $4
       WHERE id = $1 AND wallet_id = $2 AND subscriber_id = $3 RETURNING ${COLS}`,
      [id, walletId, subscriberId, now],
    );
    return rows[0];
  }

  /** A paid request: the failure count starts again. */
  async recordSuccess(q: Queryable, id: string, now: number): Promise<void> {
    await q.query(
      `UPDATE ${this.t} SET consecutive_failures = 0, last_error = NULL, last_error_code = NULL, last_used_at = $2, updated_at = $2 WHERE id = $1`,
      [id, now],
    );
  }

  /**
   * A failed request, counted under the row lock; at `maxFailures` in a row the connection is
   * deactivated and its secret wiped. Returns the row after the change (undefined: it vanished), with
   * `deactivated` true only when this failure deactivated it (not one retired or disconnected meanwhile).
   */
  async recordFailure(
    q: Queryable,
    id: string,
    code: NWCErrorCode,
    message: string,
    now: number,
    maxFailures: number,
  ): Promise<(ConnectionRow & { deactivated: boolean }) | undefined> {
    const { rows } = await q.query<ConnectionRow & { deactivated: boolean }>(
      `WITH before AS (SELECT id AS locked_id, is_active AS was_active FROM ${this.t} WHERE id = $1 FOR UPDATE)
       UPDATE ${this.t} SET consecutive_failures = consecutive_failures + 1, last_error = $2, last_error_code = $3, last_used_at = $4, updated_at = $4,
         is_active = is_active AND consecutive_failures + 1 < $5,
         secret_sealed = CASE WHEN is_active AND consecutive_failures + 1 < $5 THEN secret_sealed ELSE NULL END
       FROM before WHERE id = before.locked_id
       RETURNING ${COLS}, (before.was_active AND NOT is_active) AS deactivated`,
      [id, message, code, now, maxFailures],
    );
    return rows[0];
  }
}
