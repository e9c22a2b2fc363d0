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
  const where = `${provider} ${init.method} ${new URL(url).pathname}`;
  const text = await answerText(res, where);
  if (!res.ok) {
    // An error page may echo the request (a proxy's, say): the key it carried never reaches the log.
    const said = init.apiKey ? text.split(init.apiKey).join('[key]') : text;
    throw new ProviderUnavailableError(`${where}: HTTP ${res.status} ${said.slice(0, 200)}`);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new ProviderUnavailableError(`${provider} ${init.method} ${new URL(url).pathname}: answer is not JSON`);
  }
}

/** No provider answer we read is near this; an endless one must not fill the process's memory. */
const MAX_ANSWER_BYTES = 1024 * 1024;

/**
 * A provider's answer body as text: one that stops coming (the request's timeout) or passes
 * MAX_ANSWER_BYTES is the provider unavailable, `where` naming the call.
 */
export function answerText(res: Response, where: string): Promise<string> {
  return bounded(res)
    .text()
    .catch((err: Error) => {
      throw new ProviderUnavailableError(`${where}: ${err.message}`);
    });
}

/**
 * fetch whose answer bodies end in an error past MAX_ANSWER_BYTES, for a client that reads its answers
 * itself (the Stripe SDK): found from outside, a 200 that never ended grew the process until a string
 * could not hold it, an error nobody caught.
 */
export const boundedFetch: typeof fetch = async (input, init) => bounded(await fetch(input, init));

/** `res` with a body that errors past MAX_ANSWER_BYTES, the rest not read (its source cancelled). */
function bounded(res: Response): Response {
  if (!res.body) return res;
  let size = 0;
  const body = res.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, out) {
        size += chunk.byteLength;
        if (size > MAX_ANSWER_BYTES) out.error(new Error(`answer larger than ${MAX_ANSWER_BYTES} bytes`));
        else out.enqueue(chunk);
      },
    }),
  );
  return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
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
