import { connect, errors, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { DEV_CLOCK_BUCKET, inboxPrefix } from '@sb/contracts';
import type { Logger } from './logger.js';
import type { Clock } from './clock.js';
import { SettingError } from './config.js';
import { keepTrying } from './listener.js';

export type { NatsConnection };

/** Where and as whom a service connects to NATS (the `NATS_*` variables of commonConfig). */
export interface NatsSettings {
  NATS_URL: string;
  NATS_USER?: string;
  NATS_PASSWORD?: string;
  NATS_TLS_CA_FILE?: string;
}

/**
 * The options of every NATS connection of a service: its own user (the server allows it only its
 * subjects, see busPermissions in the contracts), replies on its own inbox prefix (the only inboxes it may
 * read), TLS when a CA is given, and endless reconnection.
 */
export function natsOptions(conn: string | NatsSettings, name: string): ConnectionOptions {
  const s: NatsSettings = typeof conn === 'string' ? { NATS_URL: conn } : conn;
  return {
    // A cluster is named by several URLs, comma-separated: the client fails over between them.
    servers: s.NATS_URL.split(',')
      .map((u) => u.trim())
      .filter(Boolean),
    name,
    maxReconnectAttempts: -1,
    // Reconnecting goes on through refused logins too (nats.js stops after two in a row): the server's
    // users may be reloaded after the services' Secret changed, and the service then comes back by itself.
    ignoreAuthErrorAbort: true,
    reconnectTimeWait: 250,
    // No stack trace captured per request (an Error object each): a timeout or no-responders error still says which subject.
    noAsyncTraces: true,
    ...(s.NATS_USER ? { user: s.NATS_USER, pass: s.NATS_PASSWORD ?? '', inboxPrefix: inboxPrefix(s.NATS_USER) } : {}),
    ...(s.NATS_TLS_CA_FILE ? { tls: { caFile: s.NATS_TLS_CA_FILE } } : {}),
  };
}

/** A NATS connection of a service (bus requests and replies, JetStream, KV, events), its writes coalesced. */
export async function connectNats(conn: string | NatsSettings, name: string): Promise<NatsConnection> {
  const nc = await connect(natsOptions(conn, name));
  coalesceWrites(nc);
  return nc;
}

/**
 * The setting to fix behind a NATS error, as one line naming it (an unreadable NATS_TLS_CA_FILE, TLS
 * asked of a server without it or the other way round, a malformed NATS_URL): only a new setting and a
 * restart change these. Undefined for any other error. Found from outside: such an error stopped billing
 * with a stack that named no variable, and left the gateway running, answering 503 for ever.
 */
export function natsSettingProblem(err: unknown): SettingError | undefined {
  const e = err as { code?: unknown; cause?: { code?: unknown }; message?: unknown } | undefined;
  const code = e?.code ?? e?.cause?.code;
  const message = String(e?.message ?? err);
  if (code === 'ENOENT' || code === 'EACCES' || code === 'EISDIR') return new SettingError('NATS_TLS_CA_FILE', `cannot be read (${message})`);
  if (err instanceof errors.ConnectionError && /\btls\b/i.test(message)) {
    return new SettingError('NATS_TLS_CA_FILE', `${message}: TLS is used with NATS_TLS_CA_FILE set, never without it; the server must agree`);
  }
  if (code === 'ERR_INVALID_URL' || err instanceof errors.InvalidArgumentError || err instanceof TypeError) return new SettingError('NATS_URL', message);
  return undefined;
}

/**
 * `connectNats` for a service's start: while no NATS server lets it in the service waits, saying where it
 * looks, with a backoff of `retryMs` doubling to 30 s. Not only while nobody answers (the server starts
 * after the services, as on Kubernetes): a refused login too, which a reload of the server's auth.conf
 * (a rotated password rolled out in the wrong order) fixes without restarting the service. Each kind of
 * failure is logged once. A local setting error (an unreadable CA file) is thrown at once.
 */
export async function connectNatsWhenReachable(conn: string | NatsSettings, name: string, log: Pick<Logger, 'warn'>, retryMs = 1000): Promise<NatsConnection> {
  // Without credentials a URL may carry (nats://user:pass@host).
  const where = ([] as string[]).concat(natsOptions(conn, name).servers ?? []).map((u) => u.replace(/\/\/[^@/]*@/, '//'));
  return keepTrying('NATS not reachable yet', () => connectNats(conn, name), {
    log,
    details: { nats_servers: where },
    firstMs: retryMs,
    fatal: (err) => natsSettingProblem(err) !== undefined,
  }).catch((err) => {
    throw natsSettingProblem(err) ?? err;
  });
}

/** The part of nats.js's protocol handler that `coalesceWrites` replaces (not in its public types). */
interface ProtocolLike {
  outbound: { fill(buf: Uint8Array, ...payloads: Uint8Array[]): void; length(): number; size(): number };
  pendingLimit: number;
  flushPending(): void;
  sendCommand(cmd: string | Uint8Array, ...payloads: Uint8Array[]): void;
}

const encoder = new TextEncoder();

/**
 * nats.js writes what it buffered to the socket in a microtask after the first command, so under load
 * each request (each HTTP request, each SQL result, arriving in an I/O callback of its own) costs a
 * socket write, the dearest step of the request path on this kind of machine (~17% of the gateway's
 * CPU). Deferred to setImmediate, the write carries the commands of every I/O callback of one turn of
 * the event loop. Order is kept (one buffer), and nothing waits longer than the rest of that turn.
 * Left as it is when a nats.js version does not have this shape.
 */
function coalesceWrites(nc: NatsConnection): void {
  const p = (nc as unknown as { protocol?: Partial<ProtocolLike> }).protocol;
  if (!p || typeof p.sendCommand !== 'function' || typeof p.flushPending !== 'function' || typeof p.outbound?.fill !== 'function') return;
  const proto = p as ProtocolLike;
  const flush = () => proto.flushPending();
  proto.sendCommand = (cmd, ...payloads) => {
    const empty = proto.outbound.length() === 0;
    proto.outbound.fill(typeof cmd === 'string' ? encoder.encode(cmd) : cmd, ...payloads);
    if (empty) setImmediate(flush);
    else if (proto.outbound.size() >= proto.pendingLimit) proto.flushPending();
  };
}

/** True when the NATS server answers a round trip within a second. */
export async function natsReachable(nc: NatsConnection | undefined): Promise<boolean> {
  if (!nc || nc.isClosed()) return false;
  return Promise.race([
    nc.rtt().then(
      () => true,
      () => false,
    ),
    new Promise<boolean>((r) => setTimeout(() => r(false), 1000)),
  ]);
}

const BUCKET = DEV_CLOCK_BUCKET;
const KEY = 'offset_ms';

/** JetStream's answers while another client is adding the same stream at the same moment. */
const STREAM_ADD_RACE = new Set([10058, 10065]);

/**
 * Runs a look-up-or-add of a JetStream stream (or KV bucket) again when it lost the race to another process
 * adding the same stream: the server then says the name is taken or its subjects overlap, although the
 * stream it sees is the one we asked for. Services of one system start side by side, so this happens.
 */
export async function creatingStream<T>(create: () => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await create();
    } catch (err) {
      if (i >= attempts || !(err instanceof JetStreamApiError) || !STREAM_ADD_RACE.has(err.code)) throw err;
      await new Promise((r) => setTimeout(r, 50 * i));
    }
  }
}

/** The key's value: the offset, and while time is held the instant it stands at (`<offset>` or `<offset>@<held>`). */
type DevTime = { offsetMs: number; heldAtMs: number | null };
const parseDevTime = (v: string): DevTime => {
  const [offset, held] = v.split('@');
  return { offsetMs: Number(offset) || 0, heldAtMs: held === undefined ? null : Number(held) || 0 };
};
const formatDevTime = (t: DevTime) => (t.heldAtMs === null ? String(t.offsetMs) : `${t.offsetMs}@${t.heldAtMs}`);

/**
 * The test clock of DEV_MODE: real time plus an offset every service reads from one NATS KV key and
 * follows as it changes, so moving it once moves the whole system. A test may also hold it still.
 */
export class DevClock implements Clock {
  private time: DevTime = { offsetMs: 0, heldAtMs: null };
  private revision = 0;

  private constructor(private readonly kv: KV) {}

  static async start(nc: NatsConnection): Promise<DevClock> {
    const kv = await creatingStream(() => new Kvm(nc).create(BUCKET, { history: 1, replicas: Number(process.env.NATS_REPLICAS ?? 1) || 1 }));
    const clock = new DevClock(kv);
    clock.apply(await kv.get(KEY));
    const watch = await kv.watch({ key: KEY });
    void (async () => {
      for await (const e of watch) if (e.operation === 'PUT') clock.apply(e);
    })();
    // The watch is an ephemeral consumer on one server: when that server of a cluster dies the watch may
    // go quiet, so the key is also read every second (a replica must never run on an old time).
    setInterval(
      () =>
        void kv.get(KEY).then(
          (e) => clock.apply(e),
          () => undefined,
        ),
      1000,
    ).unref();
    return clock;
  }

  /** Takes a value of the key unless a newer one was seen already. */
  private apply(e: { revision: number; value: Uint8Array; string(): string } | null): void {
    if (!e?.value.length || e.revision < this.revision) return;
    this.revision = e.revision;
    this.time = parseDevTime(e.string());
  }

  nowMs(): number {
    return this.time.heldAtMs ?? Date.now() + this.time.offsetMs;
  }

  get offset(): number {
    return this.time.offsetMs;
  }

  /** Time stands still (a test makes two things happen in one second). */
  get held(): boolean {
    return this.time.heldAtMs !== null;
  }

  /** Moves the shared offset by `ms` (a held time moves with it, and stays held). Returns the new offset. */
  async advance(ms: number): Promise<number> {
    return (await this.update((t) => ({ offsetMs: t.offsetMs + ms, heldAtMs: t.heldAtMs === null ? null : t.heldAtMs + ms }))).offsetMs;
  }

  /**
   * Holds time still at the present instant, for every service, or lets it run again from where it
   * stands (never backwards: the offset takes up the time spent held).
   */
  async hold(on: boolean): Promise<void> {
    await this.update((t) => {
      if (on) return t.heldAtMs === null ? { offsetMs: t.offsetMs, heldAtMs: Date.now() + t.offsetMs } : t;
      return t.heldAtMs === null ? t : { offsetMs: t.heldAtMs - Date.now(), heldAtMs: null };
    });
  }

  /**
   * Changes the shared value with a compare-and-set on the key's revision: of two concurrent moves (two
   * replicas, or two requests) neither is lost; the one that lost the race reads again and retries.
   */
  private async update(change: (t: DevTime) => DevTime): Promise<DevTime> {
    for (;;) {
      const e = await this.kv.get(KEY);
      const current = e?.operation === 'PUT' && e.value.length ? parseDevTime(e.string()) : { offsetMs: 0, heldAtMs: null };
      const next = change(current);
      try {
        const value = formatDevTime(next);
        const revision = e ? await this.kv.update(KEY, value, e.revision) : await this.kv.create(KEY, value);
        if (revision >= this.revision) {
          this.revision = revision;
          this.time = next;
        }
        return next;
      } catch (err) {
        const code = err instanceof JetStreamApiError ? err.code : undefined;
        if (code !== JetStreamApiCodes.StreamWrongLastSequence && code !== JetStreamApiCodes.StreamWrongLastSequenceUnknown) throw err;
      }
    }
  }
}
