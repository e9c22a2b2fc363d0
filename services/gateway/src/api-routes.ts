import type { RouteDef } from '@sb/contracts';

/**
 * The API's routes matched in one step: the path's segments looked up among the routes of that many
 * segments. Express walks its layers one by one, each a regular expression; this gives the same answers
 * (test/api-routes.test.ts runs both on generated paths) as its defaults: ASCII case-insensitive, one
 * trailing slash allowed, a parameter is one non-empty segment, percent-decoded (a URIError if it cannot
 * be), and the first route in the contract's order wins. Where Express throws a URIError for a parameter
 * that does not decode, the match names it instead (`undecodable`): such a path still names a route, whose
 * answer (after its auth) is the 404 of an id that cannot exist, not a bare "Not Found".
 */
export type ApiMatch = (
  | { kind: 'route'; route: RouteDef; params: Record<string, string> }
  /** A known path asked with a method it does not take: the methods it does (HEAD with every GET). */
  | { kind: 'method_not_allowed'; allow: string }
) & {
  /** The first parameter that is not UTF-8 once percent-decoded; its value in `params` is left encoded. */
  undecodable?: string;
};

interface Compiled {
  route: RouteDef;
  /** Per segment: the lower-case text it must be, or null for a parameter. */
  fixed: (string | null)[];
  names: string[];
  /** The path as the contract writes it: routes with the same one share its Allow. */
  pattern: string;
}

export function compileApiRoutes(prefix: string, routes: readonly RouteDef[]): (method: string, path: string) => ApiMatch | undefined {
  const bySize = new Map<number, Compiled[]>();
  const allowOf = new Map<string, string[]>();
  for (const route of routes) {
    const parts = route.path.split('/').slice(1);
    const fixed = parts.map((p) => (/^\{\w+\}$/.test(p) ? null : p.toLowerCase()));
    const c: Compiled = {
      route,
      fixed,
      names: parts.filter((p) => /^\{\w+\}$/.test(p)).map((p) => p.slice(1, -1)),
      pattern: route.path,
    };
    bySize.set(fixed.length, [...(bySize.get(fixed.length) ?? []), c]);
    allowOf.set(c.pattern, [...(allowOf.get(c.pattern) ?? []), route.method.toUpperCase()]);
  }
  const allow = new Map([...allowOf].map(([p, methods]) => [p, [...methods, ...(methods.includes('GET') ? ['HEAD'] : [])].join(', ')]));
  const lowerPrefix = prefix.toLowerCase();

  return (method, path) => {
    if (path.length <= prefix.length + 1 || path[prefix.length] !== '/' || asciiLower(path.slice(0, prefix.length)) !== lowerPrefix) return undefined;
    const rest = path.endsWith('/') ? path.slice(prefix.length + 1, -1) : path.slice(prefix.length + 1);
    const segments = rest.split('/');
    const candidates = bySize.get(segments.length);
    if (!candidates || segments.includes('')) return undefined;
    const lower = segments.map(asciiLower);
    const wanted = method === 'HEAD' ? 'get' : method.toLowerCase();
    let known: (Compiled & { odd: { undecodable?: string } }) | undefined;
    for (const c of candidates) {
      if (!c.fixed.every((f, i) => f === null || f === lower[i])) continue;
      const params: Record<string, string> = {};
      let undecodable: string | undefined;
      let n = 0;
      c.fixed.forEach((f, i) => {
        if (f !== null) return;
        const name = c.names[n++]!;
        const value = decodeParam(segments[i]!);
        if (value === undefined) undecodable ??= name;
        params[name] = value ?? segments[i]!;
      });
      const odd = undecodable === undefined ? {} : { undecodable };
      if (c.route.method === wanted) return { kind: 'route', route: c.route, params, ...odd };
      known ??= { ...c, odd };
    }
    return known ? { kind: 'method_not_allowed', allow: allow.get(known.pattern)!, ...known.odd } : undefined;
  };
}

/** Lower case of ASCII letters only, as a case-insensitive regular expression compares them. */
function asciiLower(s: string): string {
  return s.replace(/[A-Z]+/g, (m) => m.toLowerCase());
}

/** Express's parameter decoding: untouched without a `%`; undefined where Express throws a URIError. */
function decodeParam(v: string): string | undefined {
  if (!v.includes('%')) return v;
  try {
    return decodeURIComponent(v);
  } catch {
    return undefined;
  }
}
