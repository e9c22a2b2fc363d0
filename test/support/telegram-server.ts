import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One sendMessage the server accepted. */
export interface SentMessage {
  token: string;
  chat_id: number | string;
  text: string;
  message_id: number;
}

export interface TelegramServer {
  url: string;
  /** Messages delivered, in order. */
  sent: SentMessage[];
  /** Every sendMessage call with the status answered (delivered or not). */
  calls: { chat_id: unknown; status: number }[];
  /** Chats that started the bot (others are "chat not found"). */
  chats: Set<string>;
  /** Chats whose user blocked the bot (403). */
  blocked: Set<string>;
  /** Per chat: statuses to answer before delivering (500 = down, 429 = rate limited with retry_after). */
  script: Map<string, number[]>;
  /**
   * A private user writes to the bot (by default `/start`, as pressing Start does): the chat opens (the
   * bot may write to it from now on) and the message waits in the bot's updates for `getUpdates`.
   */
  press(token: string, chatId: number, username: string | null, text?: string): void;
  /** A chat's user takes another username (null: none); getChat answers it from then on. */
  rename(chatId: number, username: string | null): void;
  /** Any update as it is (a group message, a bot's, an id out of sequence as after a week without updates). */
  pushUpdate(token: string, update: { update_id: number; message?: unknown }): void;
  /** Bots with a webhook set: `getUpdates` is refused with 409, as Telegram does. */
  webhookSet: Set<string>;
  /** Every getUpdates call: the bot's token and the offset asked for. */
  polls: { token: string; offset: number }[];
  /** Calls per Bot API method (getMe, getUpdates, ...), answered or refused. */
  methodCalls: Map<string, number>;
  stop(): Promise<void>;
}

/**
 * A local server of the Telegram Bot API (https://core.telegram.org/bots/api), as much as the notifier
 * uses: `POST /bot<token>/sendMessage` with a JSON body and `getMe`, answering `{"ok": true, "result":
 * Message}` or `{"ok": false, "error_code", "description", "parameters"?}` with the same HTTP status,
 * including the real error texts for an unknown token, an unknown chat, a blocked bot and flood control.
 */
export async function startTelegramServer(tokens: string[]): Promise<TelegramServer> {
  const sent: SentMessage[] = [];
  const calls: TelegramServer['calls'] = [];
  const chats = new Set<string>();
  const blocked = new Set<string>();
  const script = new Map<string, number[]>();
  let nextId = 1;
  let nextUpdate = 1;
  const updates = new Map<string, Array<{ update_id: number; message: unknown }>>();
  const webhookSet = new Set<string>();
  const polls: TelegramServer['polls'] = [];
  const methodCalls = new Map<string, number>();
  const pushUpdate = (token: string, update: { update_id: number; message?: unknown }) => {
    const queue = updates.get(token) ?? [];
    updates.set(token, queue);
    queue.push({ message: undefined, ...update });
  };
  const names = new Map<number, string | null>();
  const press = (token: string, chatId: number, username: string | null, text = '/start') => {
    chats.add(String(chatId));
    names.set(chatId, username);
    pushUpdate(token, {
      update_id: nextUpdate++,
      message: {
        message_id: nextId++,
        date: Math.floor(Date.now() / 1000),
        chat: { id: chatId, type: 'private', first_name: 'Test', ...(username ? { username } : {}) },
        from: { id: chatId, is_bot: false, first_name: 'Test', ...(username ? { username } : {}) },
        text,
      },
    });
  };
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (raw += c));
    req.on('end', () => {
      const answer = (status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      const fail = (code: number, description: string, parameters?: unknown) =>
        answer(code, { ok: false, error_code: code, description, ...(parameters ? { parameters } : {}) });
      const m = /^\/bot([^/]+)\/(\w+)$/.exec(req.url ?? '');
      if (!m) return fail(404, 'Not Found');
      const [, token, method] = m as unknown as [string, string, string];
      methodCalls.set(method, (methodCalls.get(method) ?? 0) + 1);
      if (!tokens.includes(token)) return fail(401, 'Unauthorized');
      const botId = Number(token.split(':')[0]);
      if (method === 'getMe') return answer(200, { ok: true, result: { id: botId, is_bot: true, first_name: 'Test bot', username: `shop${botId}_bot` } });
      if (method === 'getUpdates') {
        if (webhookSet.has(token))
          return fail(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first");
        let query: { offset?: unknown; limit?: unknown } = {};
        try {
          query = raw ? JSON.parse(raw) : {};
        } catch {
          return fail(400, "Bad Request: can't parse JSON object");
        }
        const offset = typeof query.offset === 'number' ? query.offset : 0;
        polls.push({ token, offset });
        // An offset one past an update confirms it and every update before it (in the order they came):
        // those are never answered again. Ids are not always increasing: after a week without updates
        // Telegram starts from a random one.
        let queue = updates.get(token) ?? [];
        const confirmed = queue.findIndex((u) => u.update_id === offset - 1);
        if (confirmed >= 0) queue = queue.slice(confirmed + 1);
        updates.set(token, queue);
        const limit = typeof query.limit === 'number' ? query.limit : 100;
        return answer(200, { ok: true, result: queue.slice(0, limit) });
      }
      if (method === 'getChat') {
        let query: { chat_id?: unknown } = {};
        try {
          query = raw ? JSON.parse(raw) : {};
        } catch {
          return fail(400, "Bad Request: can't parse JSON object");
        }
        const id = Number(query.chat_id);
        if (!names.has(id) && !chats.has(String(query.chat_id))) return fail(400, 'Bad Request: chat not found');
        const username = names.get(id);
        return answer(200, { ok: true, result: { id, type: 'private', first_name: 'Test', ...(username ? { username } : {}) } });
      }
      if (method !== 'sendMessage') return fail(404, 'Not Found: method not found');
      if (req.method !== 'POST' || !/application\/json/.test(req.headers['content-type'] ?? '')) return fail(400, 'Bad Request: expected a JSON POST');
      let body: { chat_id?: unknown; text?: unknown };
      try {
        body = JSON.parse(raw);
      } catch {
        return fail(400, "Bad Request: can't parse JSON object");
      }
      const chat = String(body.chat_id ?? '');
      if (!chat || (typeof body.chat_id !== 'number' && typeof body.chat_id !== 'string')) return fail(400, 'Bad Request: chat_id is empty');
      if (typeof body.text !== 'string' || !body.text) return fail(400, 'Bad Request: message text is empty');
      if (body.text.length > 4096) return fail(400, 'Bad Request: message is too long');
      const record = (status: number) => calls.push({ chat_id: body.chat_id, status });
      const next = script.get(chat)?.shift();
      if (next === 429) {
        record(429);
        return fail(429, 'Too Many Requests: retry after 5', { retry_after: 5 });
      }
      if (next !== undefined && next >= 500) {
        record(next);
        return fail(next, 'Internal Server Error');
      }
      if (blocked.has(chat)) {
        record(403);
        return fail(403, 'Forbidden: bot was blocked by the user');
      }
      if (!chats.has(chat)) {
        record(400);
        return fail(400, 'Bad Request: chat not found');
      }
      record(200);
      const message_id = nextId++;
      sent.push({ token, chat_id: body.chat_id, text: body.text, message_id });
      return answer(200, {
        ok: true,
        result: {
          message_id,
          date: Math.floor(Date.now() / 1000),
          chat: { id: typeof body.chat_id === 'number' ? body.chat_id : -100, type: 'private' },
          text: body.text,
        },
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    sent,
    calls,
    chats,
    blocked,
    script,
    press,
    rename: (chatId: number, username: string | null) => void names.set(chatId, username),
    pushUpdate,
    webhookSet,
    polls,
    methodCalls,
    stop: () => new Promise<void>((r) => server.close(() => r())),
  };
}
