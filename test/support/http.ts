/** A thin fetch wrapper returning status, headers and parsed JSON body. */
export interface Res<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

export async function call<T = any>(
  base: string,
  method: string,
  path: string,
  opts: { key?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
): Promise<Res<T>> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key) headers['X-Api-Key'] = opts.key;
  let body: string | undefined;
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
