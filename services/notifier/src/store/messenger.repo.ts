import type { Queryable } from '@sb/runtime';

export interface MessengerLink {
  username: string;
  chat_id: number;
}

/** Telegram bots the notifier polls, and the chats their users opened by pressing Start. */
export class MessengerRepo {
  constructor(private readonly schema: string) {}

  /** Sealed secrets of every settings row with the messenger channel on (their bot tokens). */
  async sealedWithMessenger(q: Queryable): Promise<string[]> {
    const { rows } = await q.query<{ secrets_sealed: string }>(
      `SELECT secrets_sealed FROM ${this.schema}.settings
       WHERE secrets_sealed IS NOT NULL AND jsonb_typeof(config->'channels'->'messenger') = 'object'`,
    );
    return rows.map((r) => r.secrets_sealed);
  }

  /**
   * Takes the bot for one poll until `until`, unless another replica holds it or it waits after an error:
   * the offset to ask from, and whether its username is still unknown. Undefined: not this replica's turn.
   */
  async lease(q: Queryable, botId: number, now: number, until: number): Promise<{ next_offset: number; username: string | null } | undefined> {
    const { rows } = await q.query<{ next_offset: number; username: string | null }>(
      `INSERT INTO ${this.schema}.messenger_bots (bot_id, lease_until) VALUES ($1, $3)
       ON CONFLICT (bot_id) DO UPDATE SET lease_until = $3 WHERE ${this.schema}.messenger_bots.lease_until <= $2
       RETURNING next_offset, username`,
      [botId, now, until],
    );
    return rows[0];
  }

  /** A poll's result: the chats that pressed Start, and the offset that confirms what was read. */
  async polled(q: Queryable, botId: number, o: { links: MessengerLink[]; nextOffset: number; username: string | null; now: number }): Promise<void> {
    if (o.links.length) {
      await q.query(
        `INSERT INTO ${this.schema}.messenger_links (bot_id, username, chat_id, linked_at)
         SELECT $1, u, c, $4 FROM unnest($2::text[], $3::bigint[]) AS t (u, c)
         ON CONFLICT (bot_id, username) DO UPDATE SET chat_id = EXCLUDED.chat_id, linked_at = EXCLUDED.linked_at`,
        [botId, o.links.map((l) => l.username), o.links.map((l) => l.chat_id), o.now],
      );
    }
    await q.query(
      `UPDATE ${this.schema}.messenger_bots SET next_offset = GREATEST(next_offset, $2), username = COALESCE($3, username),
         lease_until = 0, last_error = NULL, polled_at = $4 WHERE bot_id = $1`,
      [botId, o.nextOffset, o.username, o.now],
    );
  }

  /** A failed poll: the bot is not polled again before `retryAt`. */
  async pollFailed(q: Queryable, botId: number, error: string, now: number, retryAt: number): Promise<void> {
    await q.query(`UPDATE ${this.schema}.messenger_bots SET lease_until = $3, last_error = $2, polled_at = $4 WHERE bot_id = $1`, [
      botId,
      error.slice(0, 300),
      retryAt,
      now,
    ]);
  }

  /** The private chat a username opened with the bot, if it pressed Start. */
  async chatOf(q: Queryable, botId: number, username: string): Promise<number | undefined> {
    const { rows } = await q.query<{ chat_id: number }>(`SELECT chat_id FROM ${this.schema}.messenger_links WHERE bot_id = $1 AND username = $2`, [
      botId,
      username,
    ]);
    return rows[0]?.chat_id;
  }

  /** The bot's username, once a poll asked Telegram for it. */
  async usernameOf(q: Queryable, botId: number): Promise<string | null> {
    const { rows } = await q.query<{ username: string | null }>(`SELECT username FROM ${this.schema}.messenger_bots WHERE bot_id = $1`, [botId]);
    return rows[0]?.username ?? null;
  }
}
