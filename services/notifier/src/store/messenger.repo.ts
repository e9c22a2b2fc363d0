import { storableText } from '@sb/contracts';
import type { Queryable } from '@sb/runtime';
import type { ChatLink } from '../channels/messenger.js';

export interface BotLease {
  next_offset: number;
  username: string | null;
  token_hash: string | null;
}

/** Telegram bots the notifier polls, and the chats their users opened by pressing Start. */
export class MessengerRepo {
  constructor(private readonly schema: string) {}

  /** Sealed secrets of every settings row in use with the messenger channel on (their bot tokens). */
  async sealedWithMessenger(q: Queryable): Promise<string[]> {
    const { rows } = await q.query<{ secrets_sealed: string }>(
      `SELECT secrets_sealed FROM ${this.schema}.settings
       WHERE secrets_sealed IS NOT NULL AND jsonb_typeof(config->'channels'->'messenger') = 'object' AND (plan_id = '' OR NOT inherit)`,
    );
    return rows.map((r) => r.secrets_sealed);
  }

  /**
   * Takes the bot for one poll until `until` under `token` (a replica's mark), unless another replica
   * holds it or it waits after an error. Undefined: not this replica's turn.
   */
  async lease(q: Queryable, botId: number, now: number, until: number, token: string): Promise<BotLease | undefined> {
    const { rows } = await q.query<BotLease>(
      `INSERT INTO ${this.schema}.messenger_bots (bot_id, lease_until, lease_token) VALUES ($1, $3, $4)
       ON CONFLICT (bot_id) DO UPDATE SET lease_until = $3, lease_token = $4 WHERE ${this.schema}.messenger_bots.lease_until <= $2
       RETURNING next_offset, username, token_hash`,
      [botId, now, until, token],
    );
    return rows[0];
  }

  /**
   * A poll's result, saved only while the lease is still this replica's: the chats that wrote to the bot
   * (a chat seen under a new username loses its old one) and the offset that confirms what was read.
   */
  async polled(
    q: Queryable,
    botId: number,
    lease: string,
    o: { links: ChatLink[]; nextOffset: number; username: string | null; tokenHash: string; now: number },
  ): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE ${this.schema}.messenger_bots SET next_offset = $3, username = COALESCE($4, username), token_hash = $5,
         lease_until = 0, lease_token = NULL, last_error = NULL, polled_at = $6 WHERE bot_id = $1 AND lease_token = $2`,
      [botId, lease, o.nextOffset, o.username, o.tokenHash, o.now],
    );
    if (rowCount !== 1 || !o.links.length) return rowCount === 1;
    const usernames = o.links.map((l) => l.username);
    const chats = o.links.map((l) => l.chat_id);
    await q.query(
      `DELETE FROM ${this.schema}.messenger_links l USING unnest($2::text[], $3::bigint[]) AS t (u, c)
       WHERE l.bot_id = $1 AND l.chat_id = t.c AND l.username <> t.u`,
      [botId, usernames, chats],
    );
    await q.query(
      `INSERT INTO ${this.schema}.messenger_links (bot_id, username, chat_id, linked_at)
       SELECT $1, u, c, $4 FROM unnest($2::text[], $3::bigint[]) AS t (u, c)
       ON CONFLICT (bot_id, username) DO UPDATE SET chat_id = EXCLUDED.chat_id, linked_at = EXCLUDED.linked_at`,
      [botId, usernames, chats, o.now],
    );
    return true;
  }

  /** A failed poll: the bot is not polled again before `retryAt`; what failed is kept to explain waiting notices. */
  async pollFailed(q: Queryable, botId: number, lease: string, error: string, now: number, retryAt: number): Promise<void> {
    await q.query(
      `UPDATE ${this.schema}.messenger_bots SET lease_until = $4, lease_token = NULL, last_error = $3, polled_at = $5
       WHERE bot_id = $1 AND lease_token = $2`,
      [botId, lease, storableText(error, 300), retryAt, now],
    );
  }

  /** The private chat a username opened with the bot (if it pressed Start), and why the bot cannot be polled (if so). */
  async linkOf(q: Queryable, botId: number, username: string): Promise<{ chat_id: number | null; bot_error: string | null }> {
    const { rows } = await q.query<{ chat_id: number | null; bot_error: string | null }>(
      `SELECT (SELECT chat_id FROM ${this.schema}.messenger_links WHERE bot_id = $1 AND username = $2) AS chat_id,
              (SELECT last_error FROM ${this.schema}.messenger_bots WHERE bot_id = $1) AS bot_error`,
      [botId, username],
    );
    return rows[0] ?? { chat_id: null, bot_error: null };
  }

  /** The chat no longer carries the username (it changed hands, or the chat is gone). */
  async unlink(q: Queryable, botId: number, username: string, chatId: number): Promise<void> {
    await q.query(`DELETE FROM ${this.schema}.messenger_links WHERE bot_id = $1 AND username = $2 AND chat_id = $3`, [botId, username, chatId]);
  }

  /** The bot's username, when `tokenHash` is the token getMe confirmed for it (another token naming its id gets none). */
  async usernameOf(q: Queryable, botId: number, tokenHash: string): Promise<string | null> {
    const { rows } = await q.query<{ username: string | null }>(`SELECT username FROM ${this.schema}.messenger_bots WHERE bot_id = $1 AND token_hash = $2`, [
      botId,
      tokenHash,
    ]);
    return rows[0]?.username ?? null;
  }
}
