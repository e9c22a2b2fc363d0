import { WebSocketServer, type WebSocket } from 'ws';
import { verifyEvent, type Event } from 'nostr-tools/pure';

/** A NIP-01 filter as clients send it. */
interface Filter {
  ids?: string[];
  kinds?: number[];
  authors?: string[];
  since?: number;
  until?: number;
  limit?: number;
  [tag: `#${string}`]: string[] | undefined;
}

export interface NostrRelay {
  url: string;
  /** Every event accepted, in order of arrival (ephemeral ones included; they are not served to later REQs). */
  received: Event[];
  /** Events refused (bad signature or shape), as sent. */
  rejected: unknown[];
  /** The filters of every REQ, in order of arrival: what clients asked this relay. */
  asked: Filter[];
  stop(): Promise<void>;
}

function matches(e: Event, f: Filter): boolean {
  if (f.ids && !f.ids.includes(e.id)) return false;
  if (f.kinds && !f.kinds.includes(e.kind)) return false;
  if (f.authors && !f.authors.includes(e.pubkey)) return false;
  if (f.since !== undefined && e.created_at < f.since) return false;
  if (f.until !== undefined && e.created_at > f.until) return false;
  for (const [key, values] of Object.entries(f)) {
    if (!key.startsWith('#') || !Array.isArray(values)) continue;
    const name = key.slice(1);
    if (!e.tags.some((t) => t[0] === name && values.includes(t[1]!))) return false;
  }
  return true;
}

const isEphemeral = (k: number) => k >= 20_000 && k < 30_000;
const isReplaceable = (k: number) => k === 0 || k === 3 || (k >= 10_000 && k < 20_000);

/**
 * A small but real NIP-01 relay on loopback, for tests: EVENT (signature verified with nostr-tools'
 * verifyEvent, answered with OK), REQ with filters (ids, kinds, authors, #<tag>, since, until, limit) over
 * stored events then live ones, EOSE, CLOSE. Ephemeral kinds (20000-29999: NIP-47 requests and answers)
 * are relayed to live subscriptions only; replaceable kinds (the NIP-47 info event 13194) keep the newest
 * per author and kind.
 */
export async function startNostrRelay(opts: { port?: number } = {}): Promise<NostrRelay> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: opts.port ?? 0 });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  const stored: Event[] = [];
  const received: Event[] = [];
  const rejected: unknown[] = [];
  const asked: Filter[] = [];
  const subs = new Map<WebSocket, Map<string, Filter[]>>();
  const send = (ws: WebSocket, msg: unknown[]) => ws.readyState === ws.OPEN && ws.send(JSON.stringify(msg));

  function accept(e: Event): void {
    received.push(e);
    if (isReplaceable(e.kind)) {
      const i = stored.findIndex((s) => s.kind === e.kind && s.pubkey === e.pubkey);
      if (i >= 0) {
        if (stored[i]!.created_at > e.created_at) return;
        stored.splice(i, 1);
      }
    }
    if (!isEphemeral(e.kind)) stored.push(e);
    for (const [ws, mine] of subs) {
      for (const [id, filters] of mine) if (filters.some((f) => matches(e, f))) send(ws, ['EVENT', id, e]);
    }
  }

  wss.on('connection', (ws) => {
    subs.set(ws, new Map());
    ws.on('close', () => subs.delete(ws));
    ws.on('message', (data) => {
      let msg: unknown;
      try {
        msg = JSON.parse(String(data));
      } catch {
        return send(ws, ['NOTICE', 'error: message is not JSON']);
      }
      if (!Array.isArray(msg)) return send(ws, ['NOTICE', 'error: message is not an array']);
      const [type, ...rest] = msg;
      if (type === 'EVENT') {
        const e = rest[0] as Event;
        let ok = false;
        try {
          ok = verifyEvent(e);
        } catch {
          ok = false;
        }
        if (!ok) {
          rejected.push(e);
          return send(ws, ['OK', (e as { id?: string })?.id ?? '', false, 'invalid: bad signature or event']);
        }
        accept(e);
        return send(ws, ['OK', e.id, true, '']);
      }
      if (type === 'REQ') {
        const [id, ...filters] = rest as [string, ...Filter[]];
        if (typeof id !== 'string' || filters.length === 0) return send(ws, ['NOTICE', 'error: bad REQ']);
        subs.get(ws)!.set(id, filters);
        asked.push(...filters);
        const seen = new Set<string>();
        for (const f of filters) {
          const hits = stored.filter((e) => matches(e, f)).sort((a, b) => b.created_at - a.created_at);
          for (const e of f.limit !== undefined ? hits.slice(0, f.limit) : hits) {
            if (!seen.has(e.id)) send(ws, ['EVENT', id, e]);
            seen.add(e.id);
          }
        }
        return send(ws, ['EOSE', id]);
      }
      if (type === 'CLOSE') {
        subs.get(ws)?.delete(rest[0] as string);
        return;
      }
      send(ws, ['NOTICE', `error: unknown message type ${String(type)}`]);
    });
  });
  const { port } = wss.address() as { port: number };
  return {
    url: `ws://127.0.0.1:${port}`,
    received,
    rejected,
    asked,
    stop: () =>
      new Promise<void>((resolve) => {
        for (const ws of wss.clients) ws.terminate();
        wss.close(() => resolve());
      }),
  };
}
