import { createInbox, errors, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { BusUnavailableError } from './errors.js';

interface Waiting {
  subject: string;
  resolve(msg: Msg): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * The replies of one connection: one subscription on `<inbox>.*`, each request waiting on a token of
 * its own. What nats.js's `request` does too, without its per-request Error objects (built for their
 * stack traces, even on success), deferred and timer promises: ~5% of the gateway's CPU.
 */
export class ReplyInbox {
  private readonly prefix: string;
  private readonly waiting = new Map<string, Waiting>();
  private seq = 0;

  constructor(
    private readonly nc: NatsConnection,
    inboxPrefix: string | undefined,
  ) {
    const inbox = createInbox(inboxPrefix);
    this.prefix = `${inbox}.`;
    nc.subscribe(`${this.prefix}*`, {
      callback: (err, msg) => {
        if (err) return this.failAll(err);
        const token = msg.subject.slice(this.prefix.length);
        const w = this.waiting.get(token);
        if (!w) return; // answered after its timeout
        this.settle(token, w);
        // NATS answers a request nobody listens to with an empty 503 status message.
        if (msg.data.length === 0 && msg.headers?.code === 503) w.reject(new BusUnavailableError(`${w.subject}: no responders`, true));
        else w.resolve(msg);
      },
    });
    // A request the server refuses to publish fails at once, not at its timeout.
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type !== 'error' || !(s.error instanceof errors.PermissionViolationError)) continue;
        const e = s.error;
        if (e.subject.startsWith(inbox)) this.failAll(e);
        else if (e.operation === 'publish') {
          for (const [token, w] of this.waiting) {
            if (w.subject !== e.subject) continue;
            this.settle(token, w);
            w.reject(e);
          }
        }
      }
    })();
  }

  request(subject: string, data: Uint8Array, headers: MsgHdrs, timeoutMs: number): Promise<Msg> {
    const token = (++this.seq).toString(36);
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(token);
        reject(new BusUnavailableError(`${subject} timed out`));
      }, timeoutMs);
      this.waiting.set(token, { subject, resolve, reject, timer });
      try {
        this.nc.publish(subject, data, { reply: this.prefix + token, headers });
      } catch (err) {
        this.settle(token, this.waiting.get(token)!);
        reject(err);
      }
    });
  }

  /** Requests still waiting for their reply. */
  get pending(): number {
    return this.waiting.size;
  }

  private settle(token: string, w: Waiting): void {
    clearTimeout(w.timer);
    this.waiting.delete(token);
  }

  private failAll(err: Error): void {
    for (const [token, w] of this.waiting) {
      this.settle(token, w);
      w.reject(err);
    }
  }
}
