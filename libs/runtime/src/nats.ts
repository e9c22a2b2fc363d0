import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Kvm, type KV } from '@nats-io/kv';
import type { Clock } from './clock.js';

export type { NatsConnection };

/** A plain NATS connection (JetStream, KV, events) next to Nest's request/reply transport. */
export function connectNats(servers: string, name: string): Promise<NatsConnection> {
  return connect({ servers, name, maxReconnectAttempts: -1, reconnectTimeWait: 250 });
}

/** True when the NATS server answers a round trip within a second. */
export async function natsReachable(nc: NatsConnection | undefined): Promise<boolean> {
  if (!nc || nc.isClosed()) return false;
  return Promise.race([nc.rtt().then(() => true, () => false), new Promise<boolean>((r) => setTimeout(() => r(false), 1000))]);
}

const BUCKET = 'dev_clock';
const KEY = 'offset_ms';

/**
 * The test clock of DEV_MODE: real time plus an offset every service reads from one NATS KV key and
 * follows as it changes, so moving it once moves the whole system.
 */
export class DevClock implements Clock {
  private offsetMs = 0;

  private constructor(private readonly kv: KV) {}

  static async start(nc: NatsConnection): Promise<DevClock> {
    const kv = await new Kvm(nc).create(BUCKET, { history: 1 });
    const clock = new DevClock(kv);
    const entry = await kv.get(KEY);
    if (entry?.value.length) clock.offsetMs = Number(entry.string()) || 0;
    const watch = await kv.watch({ key: KEY });
    void (async () => {
      for await (const e of watch) {
        if (e.operation === 'PUT') clock.offsetMs = Number(e.string()) || 0;
      }
    })();
    return clock;
  }

  nowMs(): number {
    return Date.now() + this.offsetMs;
  }

  get offset(): number {
    return this.offsetMs;
  }

  async advance(ms: number): Promise<number> {
    const next = this.offsetMs + ms;
    await this.kv.put(KEY, String(next));
    this.offsetMs = next;
    return next;
  }
}
