import { createInbox, errors, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { BusUnavailableError } from './errors.js';
import { Listener } from './listener.js';
import type { Logger } from './logger.js';

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
  private sub: Subscription | undefined;
  private closed = false;
  /**
   * Makes the subscription again after the server refused it (a permissions reload) or dropped it:
   * without it every later request would wait for its timeout, for good.
   */
  private readonly listener: Listener;

  constructor(
    private readonly nc: NatsConnection,
    inboxPrefix: string | undefined,
    log?: Pick<Logger, 'warn' | 'info'>,
  ) {
    const inbox = createInbox(inboxPrefix);
    this.prefix = `${inbox}.`;
    this.listener = new Listener('bus reply inbox', () => this.resubscribe(), { log, details: { inbox: `${this.prefix}*` } });
    this.subscribe();
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

  /** One try of the listener: subscribed, and the server's word on it (a refusal comes before the round trip's answer). */
  private async resubscribe(): Promise<void> {
    if (this.closed || this.nc.isClosed() || this.nc.isDraining()) return;
    // Tried again after a loss reported during an earlier try: one open subscription is enough.
    if (this.sub && !this.sub.isClosed()) return;
    const sub = this.subscribe();
    await this.nc.flush();
    if (this.sub !== sub || sub.isClosed()) throw new BusUnavailableError('the reply inbox subscription was refused');
  }

  private subscribe(): Subscription {
    const sub = this.nc.subscribe(`${this.prefix}*`, {
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
    this.sub = sub;
    void sub.closed.then((err) => {
      if (this.sub !== sub) return;
      this.sub = undefined;
      // Closed with its connection: the bus client opens a new connection, with a new inbox.
      if (this.closed || this.nc.isClosed() || this.nc.isDraining()) return;
      this.listener.lost(err ?? new Error('reply subscription closed by the server'));
    });
    return sub;
  }

  request(subject: string, data: Uint8Array, headers: MsgHdrs, timeoutMs: number): Promise<Msg> {
    const token = (++this.seq).toString(36);
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(token);
        reject(new BusUnavailableError(`${subject} timed out`));
      }, timeoutMs);
      // Without its reply subscription (being made again) the answer could not arrive: unavailable now.
      if (!this.sub) {
        clearTimeout(timer);
        return reject(new BusUnavailableError(`${subject}: the reply inbox is not subscribed (being made again)`));
      }
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

  /** The connection is closing: the subscription goes with it, not made again. */
  close(): void {
    this.closed = true;
    this.listener.stop();
  }

  private failAll(err: Error): void {
    for (const [token, w] of this.waiting) {
      this.settle(token, w);
      w.reject(err);
    }
  }
}
