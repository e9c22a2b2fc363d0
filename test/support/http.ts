/** A thin fetch wrapper returning status, headers and parsed JSON body. */
interface Res<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

export async function call<T = any>(
  base: string,
  method: string,
  path: string,
  opts: { key?: string; body?: unknown; raw?: string | Uint8Array; headers?: Record<string, string> } = {},
): Promise<Res<T>> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key) headers['X-Api-Key'] = opts.key;
  let body: string | Uint8Array | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) body = JSON.stringify(opts.body);
  if (body !== undefined) headers['Content-Type'] ??= 'application/json';
  const res = await fetch(`${base}${path}`, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    /* not JSON */
  }
  return { status: res.status, headers: res.headers, body: parsed as T };
}

export const client = (base: string, key?: string) => ({
  get: <T = any>(path: string, o: Parameters<typeof call>[3] = {}) => call<T>(base, 'GET', path, { key, ...o }),
  post: <T = any>(path: string, body?: unknown, o: Parameters<typeof call>[3] = {}) => call<T>(base, 'POST', path, { key, body, ...o }),
  put: <T = any>(path: string, body?: unknown, o: Parameters<typeof call>[3] = {}) => call<T>(base, 'PUT', path, { key, body, ...o }),
  patch: <T = any>(path: string, body?: unknown, o: Parameters<typeof call>[3] = {}) => call<T>(base, 'PATCH', path, { key, body, ...o }),
  del: <T = any>(path: string, o: Parameters<typeof call>[3] = {}) => call<T>(base, 'DELETE', path, { key, ...o }),
});

/**
 * Polls `fn` until `ok` holds or `ms` pass, and returns the last value (the caller asserts on it, so a
 * timeout fails with the value actually seen).
 */
export async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  let v = await fn();
  while (!ok(v) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 150));
    v = await fn();
  }
  return v;
}

/** An answer with when it was asked and answered; status 0 is no answer at all (connection failure, or a minute without one). */
export interface TimedAnswer {
  status: number;
  start: number;
  end: number;
  retryAfter: string | null;
  body: any;
}

/** One request for tests of outages: never throws, and tells how long the answer took. */
export async function timedCall(
  base: string,
  method: string,
  path: string,
  o: { key?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<TimedAnswer> {
  const start = Date.now();
  const headers: Record<string, string> = { ...o.headers };
  if (o.key) headers['X-Api-Key'] = o.key;
  if (o.body !== undefined) headers['Content-Type'] = 'application/json';
  try {
    const res = await fetch(`${base}${path}`, {
      method,
      headers,
      body: o.body === undefined ? undefined : JSON.stringify(o.body),
      signal: AbortSignal.timeout(60_000),
    });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, start, end: Date.now(), retryAfter: res.headers.get('retry-after'), body };
  } catch (err) {
    return { status: 0, start, end: Date.now(), retryAfter: null, body: String(err) };
  }
}
