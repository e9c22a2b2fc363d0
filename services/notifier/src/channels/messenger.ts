import { delivered, failed, type SendOutcome } from './outcome.js';

/** Telegram's limit for one message. */
const MAX_TEXT = 4096;

/**
 * A chat id as the Bot API takes it: a number (user or group), or `@channelusername`. A bare name is read
 * as a username.
 */
export function chatIdOf(handle: string): number | string {
  const h = handle.trim();
  if (/^-?\d{1,20}$/.test(h) && Number.isSafeInteger(Number(h))) return Number(h);
  return h.startsWith('@') ? h : `@${h}`;
}

/**
 * One message through the Telegram Bot API `sendMessage`. 400 (chat not found) and 403 (bot blocked,
 * not started) are permanent; 429 carries `retry_after`; 5xx and network errors are retried. The token
 * is part of the URL: no error text here ever contains the URL.
 */
export async function sendMessenger(o: { apiUrl: string; token: string; timeoutMs: number }, chat: string, text: string): Promise<SendOutcome> {
  const url = `${o.apiUrl.replace(/\/$/, '')}/bot${o.token}/sendMessage`;
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        chat_id: chatIdOf(chat),
        text: text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT - 1)}…` : text,
        link_preview_options: { is_disabled: true },
      }),
      redirect: 'error',
      signal: AbortSignal.timeout(o.timeoutMs),
    });
  } catch (err) {
    const e = err as Error & { cause?: { code?: string } };
    return failed(e.name === 'TimeoutError' ? `Telegram did not answer within ${o.timeoutMs} ms` : `Telegram unreachable (${e.cause?.code ?? e.message})`);
  }
  let body: { ok?: boolean; error_code?: number; description?: string; parameters?: { retry_after?: number } } = {};
  try {
    body = (await res.json()) as typeof body;
  } catch {
    /* not JSON: judged by the status */
  }
  if (res.ok && body.ok === true) return delivered();
  const code = body.error_code ?? res.status;
  const why = `${code} ${typeof body.description === 'string' ? body.description.slice(0, 300) : res.statusText}`;
  if (code === 429) return failed(why, false, Math.max(1, Number(body.parameters?.retry_after) || 30));
  if (code >= 500 || code < 400) return failed(why);
  // 400 chat not found, 401 bad token, 403 blocked or never started, 404 no such bot: sending again cannot help.
  return failed(why, true);
}
