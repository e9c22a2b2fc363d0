import { DomainError } from '@sb/runtime';
import { z } from 'zod';

// What every provider adapter (and the rate source) shares: a neutral 503 for a provider that failed,
// JSON over HTTP with a deadline, and logging the reason of a failure once.

/**
 * The provider failed, answered non-2xx, or did not answer in time. The caller sees a 503 with a neutral
 * sentence; `reason` (provider, status, cause) is for the log only.
 */
export class ProviderUnavailableError extends DomainError {
  constructor(
    readonly reason: string,
    message = 'The payment provider is not available right now; try again shortly',
  ) {
    super('unavailable', message);
    this.name = 'ProviderUnavailableError';
  }
}

/**
 * JSON over HTTP with a deadline; any network failure, timeout or non-2xx becomes ProviderUnavailableError.
 * `apiKey` goes out as X-Api-Key; public APIs (Esplora) are called without it.
 */
export async function fetchJson(
  provider: string,
  url: string,
  init: { method: 'GET' | 'POST'; apiKey?: string; body?: unknown; timeoutMs: number },
  // biome-ignore lint/suspicious/noExplicitAny: a provider's JSON; each caller checks the fields it reads.
): Promise<any> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: init.method,
      headers: {
        ...(init.apiKey !== undefined ? { 'X-Api-Key': init.apiKey } : {}),
        accept: 'application/json',
        ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      body: init.body !== undefined ? JSON.stringify(init.body) : undefined,
      signal: AbortSignal.timeout(init.timeoutMs),
    });
  } catch (err) {
    const e = err as Error;
    const why = e.name === 'TimeoutError' ? `no answer within ${init.timeoutMs} ms` : e.message;
    throw new ProviderUnavailableError(`${provider} ${init.method} ${new URL(url).pathname}: ${why}`);
  }
  const text = await res.text().catch(() => '');
  if (!res.ok) {
    throw new ProviderUnavailableError(`${provider} ${init.method} ${new URL(url).pathname}: HTTP ${res.status} ${text.slice(0, 200)}`);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new ProviderUnavailableError(`${provider} ${init.method} ${new URL(url).pathname}: answer is not JSON`);
  }
}

/** Runs a provider call; a ProviderUnavailableError is logged with its reason (the caller only sees a neutral 503). */
export async function logProviderFailure<T>(log: { warn(obj: object, msg: string): void }, context: object, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof ProviderUnavailableError) log.warn({ ...context, reason: err.reason }, 'payment provider unavailable');
    throw err;
  }
}

/** A provider's base URL setting (a trailing slash is dropped). */
export const urlSetting = z
  .string()
  .url({ message: 'must be an http(s):// URL' })
  .transform((u) => u.replace(/\/+$/, ''));
/** A provider's key or secret setting. */
export const secretSetting = z.string().min(1);
