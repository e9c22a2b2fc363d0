import { createHash } from 'node:crypto';
import { delivered, failed, type SendOutcome } from './outcome.js';
import { storableText, telegram } from '@sb/contracts';

/** Telegram's limit for one message (counted here in UTF-16 units, never more than Telegram's count). */
const MAX_TEXT = 4096;

/** `s` cut to at most `n` UTF-16 units, never between the two halves of a code point. */
const cutAt = (s: string, n: number): string => {
  if (s.length <= n) return s;
  const code = s.charCodeAt(n - 1);
  return s.slice(0, code >= 0xd800 && code <= 0xdbff ? n - 1 : n);
};

/**
 * A message within Telegram's limit. A message ends with its footer (after the last blank line: the
 * portal link and the signature), which must survive: the body before it is cut instead, marked "…".
 */
export function fitText(text: string, max = MAX_TEXT): string {
  if (text.length <= max) return text;
  const at = text.lastIndexOf('\n\n');
  const footer = at >= 0 ? text.slice(at) : '';
  const room = max - footer.length - 1;
  // A footer too long to leave room for anything (never ours): the start of the text, as it comes.
  if (room <= 0) return `${cutAt(text, max - 1)}…`;
  return `${cutAt(text.slice(0, at), room)}…${footer}`;
}

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
  if (telegram.chatId.test(h) && Number.isSafeInteger(Number(h))) return Number(h);
  return h.startsWith('@') ? h : `@${h}`;
}

/** A handle's username as links keep it (lower case, no @); undefined for a numeric chat id. */
export function usernameOf(handle: string): string | undefined {
  const id = chatIdOf(handle);
  return typeof id === 'number' ? undefined : id.slice(1).toLowerCase();
}

/** A bot's numeric id: the part of its token before the colon (undefined past 2^53: no Telegram id is). */
export function botIdOf(token: string): number | undefined {
  const id = Number(token.split(':', 1)[0]);
  return Number.isSafeInteger(id) && id > 0 ? id : undefined;
}

/** What is kept of a token to know it again (never the token). */
export const tokenHashOf = (token: string): string => createHash('sha256').update(token).digest('hex');

/** A Bot API call that failed: Telegram's code (0: no answer at all) and words, and its retry_after. */
export type BotFailure = { ok: false; code: number; why: string; retryAfterS?: number };
type Answer<T> = { ok: true; result: T } | BotFailure;

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
  // A 2xx that is not a Bot API answer (a proxy's page, `{"ok": false}` without a reason) says so.
  const said =
    typeof answer.description === 'string' ? storableText(answer.description, 300) : res.ok ? `${res.statusText}, but not a Bot API answer` : res.statusText;
  const why = `${code} ${said}`;
  return code === 429 ? { ok: false, code, why, retryAfterS: Math.max(1, Number(answer.parameters?.retry_after) || 30) } : { ok: false, code, why };
}

/**
 * One message through `sendMessage`. 400 (chat not found) and 403 (bot blocked, not started) are
 * permanent; 429 carries `retry_after`; 5xx, network errors and answers that are not the Bot API's are
 * retried. (A username not linked to a chat yet is never sent to: see channels/index.ts.)
 */
export async function sendMessenger(o: BotApi, chat: string | number, text: string): Promise<SendOutcome> {
  const r = await callBot(o, 'sendMessage', {
    chat_id: typeof chat === 'number' ? chat : chatIdOf(chat),
    text: fitText(text),
    link_preview_options: { is_disabled: true },
  });
  if (r.ok) return delivered();
  if (r.code === 429) return failed(r.why, false, r.retryAfterS);
  if (r.code >= 500 || r.code < 400) return failed(r.why);
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
 * The bot's messages since `offset` (`getUpdates`, no long poll, the bot's own choice of update kinds
 * left alone): the private chats of people with a username, the chats that sent /start (with their
 * username, if any), and the offset that confirms this batch to Telegram: the last update's id + 1. Not
 * the highest seen: after a week without updates Telegram numbers them afresh from a random, possibly
 * lower, id.
 */
export async function botUpdates(
  o: BotApi,
  offset: number,
): Promise<{ ok: true; links: ChatLink[]; started: { chat_id: number; username: string | null }[]; nextOffset: number } | BotFailure> {
  const r = await callBot<Update[]>(o, 'getUpdates', { offset, limit: 100, timeout: 0 });
  if (!r.ok) return r;
  const links = new Map<string, number>();
  const started = new Map<number, string | null>();
  let nextOffset = offset;
  for (const u of Array.isArray(r.result) ? r.result : []) {
    if (typeof u?.update_id === 'number' && Number.isSafeInteger(u.update_id)) nextOffset = u.update_id + 1;
    const m = u?.message;
    const chatId = m?.chat?.id;
    if (m?.chat?.type !== 'private' || typeof chatId !== 'number' || !Number.isSafeInteger(chatId) || m.from?.is_bot === true) continue;
    const name = typeof m.from?.username === 'string' && telegram.username.test(m.from.username) ? m.from.username.toLowerCase() : null;
    if (name) links.set(name, chatId);
    if (typeof m.text === 'string' && /^\/start\b/.test(m.text)) started.set(chatId, name);
  }
  return {
    ok: true,
    links: [...links].map(([username, chat_id]) => ({ username, chat_id })),
    started: [...started].map(([chat_id, username]) => ({ chat_id, username })),
    nextOffset,
  };
}

/** Who the token belongs to (`getMe`): its bot's id and username. */
export async function botIdentity(o: BotApi): Promise<{ ok: true; id: number; username: string | null } | BotFailure> {
  const r = await callBot<{ id?: unknown; username?: unknown }>(o, 'getMe', {});
  if (!r.ok) return r;
  if (typeof r.result?.id !== 'number') return { ok: false, code: 0, why: 'getMe answered no bot id' };
  return { ok: true, id: r.result.id, username: typeof r.result.username === 'string' ? r.result.username : null };
}

/** How long a token's getMe answer is kept: a bot's id never changes for its token, its username seldom. */
export const BOT_IDENTITY_TTL_MS = 24 * 3600_000;
/** getMe's answers per API and token (by its hash, never the token itself). */
const identities = new Map<string, { id: number; username: string | null; until: number }>();
const identityKey = (o: BotApi) => `${o.apiUrl}|${tokenHashOf(o.token)}`;

/**
 * `botIdentity`, asked once per token and TTL: a bot whose polls fail (a webhook set, Telegram down)
 * asked getMe again on every poll. A refused token is forgotten (`forgetBotIdentity`), so a token that
 * works again is confirmed anew.
 */
export async function knownBotIdentity(o: BotApi): Promise<{ ok: true; id: number; username: string | null } | BotFailure> {
  const key = identityKey(o);
  const hit = identities.get(key);
  if (hit && hit.until > Date.now()) return { ok: true, id: hit.id, username: hit.username };
  const me = await botIdentity(o);
  if (me.ok) identities.set(key, { id: me.id, username: me.username, until: Date.now() + BOT_IDENTITY_TTL_MS });
  else if (me.code === 401 || me.code === 404) identities.delete(key);
  return me;
}

/** Telegram refused the token (401): its identity is asked again next time. */
export function forgetBotIdentity(o: BotApi): void {
  identities.delete(identityKey(o));
}

/** The username a chat carries now (`getChat`): a username can pass to someone else. */
export async function chatUsername(o: BotApi, chatId: number): Promise<{ ok: true; username: string | null } | BotFailure> {
  const r = await callBot<{ username?: unknown }>(o, 'getChat', { chat_id: chatId });
  if (!r.ok) return r;
  return { ok: true, username: typeof r.result?.username === 'string' ? r.result.username.toLowerCase() : null };
}
