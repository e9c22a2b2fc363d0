import type { Logger } from './logger.js';

/** The first wait after a bus listener could not start; it doubles up to LISTEN_RETRY_MAX_MS. */
export const LISTEN_RETRY_MS = 1000;
export const LISTEN_RETRY_MAX_MS = 30_000;

type Log = Pick<Logger, 'warn' | 'info'>;
/** Where `keepTrying` says its failures: a pino logger, or anything taking its (fields, message) form. */
export type Warns = { warn(obj: object, msg: string): void };

/** Thrown by `keepTrying` when its owner stopped while it waited. */
export class StoppedError extends Error {
  constructor(what: string) {
    super(`${what}: stopped`);
    this.name = 'StoppedError';
  }
}

/**
 * What a failure is, for logging each kind once: its class, code and message. A permission violation
 * names its operation and subject, so a second denied subject is a new kind (worth its own line).
 */
export function errorKind(err: unknown): string {
  const e = err as { name?: unknown; code?: unknown; message?: unknown; cause?: { code?: unknown } } | undefined;
  return `${String(e?.name ?? typeof err)}|${String(e?.code ?? e?.cause?.code ?? '')}|${String(e?.message ?? err)}`;
}

export interface KeepTryingOptions {
  log?: Warns;
  /** Fields of each log line (where it looks, what it listens to). */
  details?: Record<string, unknown>;
  firstMs?: number;
  maxMs?: number;
  /** A failure only a restart can change (an unreadable file named by a setting): thrown, not retried. */
  fatal?: (err: unknown) => boolean;
  /** The line for a kind of failure, when the default (`<what>; trying again with a backoff`) says too little. */
  say?: (err: unknown) => string;
  /** Kinds already logged in this outage (shared by a listener across its restarts). */
  logged?: Set<string>;
  stopped?: () => boolean;
}

/**
 * Runs `attempt` until it succeeds, waiting `firstMs` doubling to `maxMs` between tries. Whatever the
 * failure (NATS not up yet, a login or subject the server refuses until its config is reloaded, a
 * JetStream stream not there yet), it may go away by itself: a listener that gave up would stay deaf
 * until someone restarts the process. Each kind of failure is logged once, not a line per try.
 */
export async function keepTrying<T>(what: string, attempt: () => Promise<T>, o: KeepTryingOptions = {}): Promise<T> {
  const logged = o.logged ?? new Set<string>();
  const max = o.maxMs ?? LISTEN_RETRY_MAX_MS;
  for (let wait = o.firstMs ?? LISTEN_RETRY_MS; ; wait = Math.min(wait * 2, max)) {
    if (o.stopped?.()) throw new StoppedError(what);
    try {
      return await attempt();
    } catch (err) {
      if (o.fatal?.(err) || o.stopped?.()) throw err;
      const kind = errorKind(err);
      if (!logged.has(kind)) {
        logged.add(kind);
        o.log?.warn({ err: String(err), ...o.details, retry_in_ms: wait, retry_max_ms: max }, o.say?.(err) ?? `${what}; trying again with a backoff`);
      }
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

/**
 * One bus listener (subscriptions, a consumer) of a service: started with `keepTrying`, and started
 * again the same way when it is lost later (the server dropped a subscription, or refused it after a
 * reload of its permissions). `up` is what /readyz reports.
 */
export class Listener {
  private state: 'down' | 'up' | 'stopped' = 'down';
  private running: Promise<void> | undefined;
  /**
   * A loss reported while a try was under way, after that try began: the try may have checked before it
   * (a refusal arriving between its round trip and its end), so it is not taken as up.
   */
  private lostMeanwhile: unknown;
  /** Kinds of failure logged since the listener was last up. */
  private readonly logged = new Set<string>();

  constructor(
    private readonly what: string,
    private readonly start: () => Promise<void>,
    private readonly o: Omit<KeepTryingOptions, 'logged' | 'stopped' | 'log'> & { log?: Log } = {},
  ) {}

  get up(): boolean {
    return this.state === 'up';
  }

  /** Tries until the listener is up; resolves then (or once stopped). Only a `fatal` failure rejects. */
  run(): Promise<void> {
    const attempt = () => {
      this.lostMeanwhile = undefined;
      return this.start();
    };
    this.running ??= keepTrying(`${this.what} not listening`, attempt, { ...this.o, logged: this.logged, stopped: () => this.state === 'stopped' })
      .then(
        () => {
          if (this.state === 'stopped' || this.lostMeanwhile !== undefined) return;
          this.state = 'up';
          if (this.logged.size) this.o.log?.info({ ...this.o.details }, `${this.what} listening again`);
          this.logged.clear();
        },
        (err) => {
          if (!(err instanceof StoppedError) && this.state !== 'stopped') throw err;
        },
      )
      .finally(() => {
        this.running = undefined;
        const err = this.lostMeanwhile;
        this.lostMeanwhile = undefined;
        if (err !== undefined) this.lost(err);
      });
    return this.running;
  }

  /**
   * The listener went away (`err`: why): not ready until it is back, tried again after the first wait.
   * While a try is under way it is kept for after that try (which may have looked before it came).
   */
  lost(err: unknown): void {
    if (this.state === 'stopped') return;
    if (this.running) {
      this.lostMeanwhile = err ?? new Error(`${this.what} lost`);
      return;
    }
    this.state = 'down';
    const kind = errorKind(err);
    if (!this.logged.has(kind)) {
      this.logged.add(kind);
      this.o.log?.warn({ err: String(err), ...this.o.details }, `${this.what} lost; trying again with a backoff`);
    }
    setTimeout(() => void this.run().catch(() => undefined), this.o.firstMs ?? LISTEN_RETRY_MS).unref();
  }

  stop(): void {
    this.state = 'stopped';
  }
}
