import { createInbox, errors, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { WORKING_HEADER, WORKING_SUFFIX } from '@sb/contracts';
import { BusUnavailableError } from './errors.js';
import { Listener } from './listener.js';
import type { Logger } from './logger.js';

interface Waiting {
  subject: string;
  resolve(msg: Msg): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
  /** When the request's whole wait ends, whatever signals came. */
  until: number;
  /** With working signals asked for: how long the request waits without one. */
  idleMs?: number;
  /** The last working signal (none yet: the request waits its whole wait, whatever version answers it). */
  lastSign?: number;
}

/** How a request waits: all of `waitMs`, or with working signals (see WORKING_HEADER) no more than `idleMs` without one. */
export interface Wait {
  waitMs: number;
  /** Asks the answerer for working signals at `signalEveryMs`; once one came, `idleMs` without the next fails the request. */
  signals?: {
    idleMs: number;
    signalEveryMs: number;
  };
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
    // `>`, not `*`: working signals come on `<token>.w`.
    const sub = this.nc.subscribe(`${this.prefix}>`, {
      callback: (err, msg) => {
        if (err) return this.failAll(err);
        const rest = msg.subject.slice(this.prefix.length);
        if (rest.endsWith(WORKING_SUFFIX)) return this.signal(rest.slice(0, -WORKING_SUFFIX.length));
        const w = this.waiting.get(rest);
        if (!w) return; // answered after its timeout
        this.settle(rest, w);
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

  /**
   * Publishes a request and waits for its reply. A waiting request is not failed when the connection
   * drops: the answerer's reply (and its signals) published after the reconnect still arrive; with
   * signals, the idle rule ends the wait when they do not.
   */
  request(subject: string, data: Uint8Array, headers: MsgHdrs, wait: Wait): Promise<Msg> {
    const token = (++this.seq).toString(36);
    return new Promise<Msg>((resolve, reject) => {
      // Without its reply subscription (being made again) the answer could not arrive: unavailable now.
      if (!this.sub) return reject(new BusUnavailableError(`${subject}: the reply inbox is not subscribed (being made again)`));
      const now = Date.now();
      const s = wait.signals;
      if (s) headers.set(WORKING_HEADER, String(s.signalEveryMs));
      const w: Waiting = {
        subject,
        resolve,
        reject,
        timer: undefined as unknown as NodeJS.Timeout,
        until: now + wait.waitMs,
        idleMs: s?.idleMs,
        lastSign: undefined,
      };
      w.timer = setTimeout(() => this.due(token, w), wait.waitMs);
      this.waiting.set(token, w);
      try {
        this.nc.publish(subject, data, { reply: this.prefix + token, headers });
      } catch (err) {
        this.settle(token, this.waiting.get(token)!);
        reject(err);
      }
    });
  }

  /** A working signal: the request's idle clock starts again (the timer, when it fires, looks at it). */
  private signal(token: string): void {
    const w = this.waiting.get(token);
    if (!w || w.idleMs === undefined) return;
    const first = w.lastSign === undefined;
    w.lastSign = Date.now();
    // Until the first signal the timer was set for the whole wait.
    if (first) {
      clearTimeout(w.timer);
      w.timer = setTimeout(() => this.due(token, w), Math.min(w.idleMs, w.until - w.lastSign));
    }
  }

  /** The request's timer: due at the end of its wait, or after `idleMs` without a sign of life. */
  private due(token: string, w: Waiting): void {
    if (this.waiting.get(token) !== w) return;
    const now = Date.now();
    const idleEnd = w.lastSign !== undefined && w.idleMs !== undefined ? w.lastSign + w.idleMs : Number.POSITIVE_INFINITY;
    const end = Math.min(w.until, idleEnd);
    if (now < end) {
      w.timer = setTimeout(() => this.due(token, w), end - now);
      return;
    }
    this.waiting.delete(token);
    // A timeout either way (a 503 the client may retry), never `noResponders`: somebody may have taken it.
    w.reject(
      new BusUnavailableError(now < w.until ? `${w.subject}: no sign of its answerer for ${w.idleMs} ms (it stopped working)` : `${w.subject} timed out`),
    );
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
