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
