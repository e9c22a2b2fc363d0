import { delivered, failed, type SendOutcome } from './outcome.js';

/** Telegram's limit for one message. */
const MAX_TEXT = 4096;

export interface BotApi {
  apiUrl: string;
  token: string;
  timeoutMs: number;
}

/**
 * A chat id as the Bot API takes it: a number (user or group), or `@channelusername`. A bare name is read
 * as a username.
 */
export function chatIdOf(handle: string): number | string {
  const h = handle.trim();
  if (/^-?\d{1,20}$/.test(h) && Number.isSafeInteger(Number(h))) return Number(h);
  return h.startsWith('@') ? h : `@${h}`;
}

/** A handle's username as links keep it (lower case, no @); undefined for a numeric chat id. */
export function usernameOf(handle: string): string | undefined {
  const id = chatIdOf(handle);
  return typeof id === 'number' ? undefined : id.slice(1).toLowerCase();
}

/** A bot's numeric id: the part of its token before the colon. */
export const botIdOf = (token: string): number => Number(token.split(':', 1)[0]);

type Answer<T> = { ok: true; result: T } | { ok: false; code: number; why: string; retryAfterS?: number };

/**
 * One Bot API method, as JSON both ways. The token is part of the URL: no error text here ever contains
 * the URL. `code` 0 is no answer at all (unreachable, timed out).
 */
async function callBot<T>(o: BotApi, method: string, body: unknown): Promise<Answer<T>> {
  let res: Response;
  try {
    res = await fetch(`${o.apiUrl.replace(/\/$/, '')}/bot${o.token}/${method}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      redirect: 'error',
      signal: AbortSignal.timeout(o.timeoutMs),
    });
  } catch (err) {
    const e = err as Error & { cause?: { code?: string } };
    return {
      ok: false,
      code: 0,
      why: e.name === 'TimeoutError' ? `Telegram did not answer within ${o.timeoutMs} ms` : `Telegram unreachable (${e.cause?.code ?? e.message})`,
    };
  }
  let answer: { ok?: boolean; result?: T; error_code?: number; description?: string; parameters?: { retry_after?: number } } = {};
  try {
    answer = (await res.json()) as typeof answer;
  } catch {
    /* not JSON: judged by the status */
  }
  if (res.ok && answer.ok === true) return { ok: true, result: answer.result as T };
  const code = answer.error_code ?? res.status;
  const why = `${code} ${typeof answer.description === 'string' ? answer.description.slice(0, 300) : res.statusText}`;
  return code === 429 ? { ok: false, code, why, retryAfterS: Math.max(1, Number(answer.parameters?.retry_after) || 30) } : { ok: false, code, why };
}

/**
 * One message through `sendMessage`. 400 (chat not found) and 403 (bot blocked, not started) are
 * permanent, except for a username that has not pressed Start on the bot yet (`awaitingStart`): that is
 * retried, since it opens the chat the moment it does; 429 carries `retry_after`; 5xx and network errors
 * are retried.
 */
export async function sendMessenger(o: BotApi, chat: string | number, text: string, awaitingStart = false): Promise<SendOutcome> {
  const r = await callBot(o, 'sendMessage', {
    chat_id: typeof chat === 'number' ? chat : chatIdOf(chat),
    text: text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT - 1)}…` : text,
    link_preview_options: { is_disabled: true },
  });
  if (r.ok) return delivered();
  if (r.code === 429) return failed(r.why, false, r.retryAfterS);
  if (r.code >= 500 || r.code < 400) return failed(r.why);
  if (awaitingStart && (r.code === 400 || r.code === 403)) return failed(`${r.why} (${chat} has not pressed Start on the bot yet)`);
  // 400 chat not found, 401 bad token, 403 blocked or never started, 404 no such bot: sending again cannot help.
  return failed(r.why, true);
}

/** A private chat opened with the bot by a user with a username. */
export interface ChatLink {
  username: string;
  chat_id: number;
}

interface Update {
  update_id?: unknown;
  message?: { chat?: { id?: unknown; type?: unknown }; from?: { username?: unknown; is_bot?: unknown }; text?: unknown };
}

/**
 * The bot's new messages since `offset` (`getUpdates`, no long poll): the private chats of users with a
 * username, those that sent /start (to be greeted), and the offset that confirms them to Telegram.
 */
export async function botUpdates(
  o: BotApi,
  offset: number,
): Promise<{ ok: true; links: ChatLink[]; started: number[]; nextOffset: number } | { ok: false; code: number; why: string; retryAfterS?: number }> {
  const r = await callBot<Update[]>(o, 'getUpdates', { offset, limit: 100, timeout: 0, allowed_updates: ['message'] });
  if (!r.ok) return r;
  const links = new Map<string, number>();
  const started = new Set<number>();
  let nextOffset = offset;
  for (const u of Array.isArray(r.result) ? r.result : []) {
    if (typeof u?.update_id === 'number' && Number.isSafeInteger(u.update_id)) nextOffset = Math.max(nextOffset, u.update_id + 1);
    const m = u?.message;
    const chatId = m?.chat?.id;
    if (m?.chat?.type !== 'private' || typeof chatId !== 'number' || !Number.isSafeInteger(chatId) || m.from?.is_bot === true) continue;
    if (typeof m.from?.username === 'string' && /^[A-Za-z0-9_]{4,64}$/.test(m.from.username)) links.set(m.from.username.toLowerCase(), chatId);
    if (typeof m.text === 'string' && /^\/start\b/.test(m.text)) started.add(chatId);
  }
  return { ok: true, links: [...links].map(([username, chat_id]) => ({ username, chat_id })), started: [...started], nextOffset };
}

/** The bot's own username (`getMe`), for checkout pages to link to; null when Telegram does not say. */
export async function botUsername(o: BotApi): Promise<string | null> {
  const r = await callBot<{ username?: unknown }>(o, 'getMe', {});
  return r.ok && typeof r.result?.username === 'string' ? r.result.username : null;
}
