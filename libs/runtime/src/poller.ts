import { isBusOutage, OutageLog } from './outage.js';
import { inSpan } from './telemetry.js';
import type { Logger } from './logger.js';

/**
 * Runs `tick` every `intervalMs`, never two at once, until stopped; a tick that did a full batch runs
 * again at once so a backlog drains without waiting.
 */
export class Poller {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private stopped = false;
  /**
   * The database away: said once, not at every tick of the outage. Work a round started that fails
   * later (a send under way) says it here too, so the worker says it once in all.
   */
  readonly outage: OutageLog;
  /** The bus (or a service a round asks) away, said once as well. */
  readonly busOutage: OutageLog;
  /**
   * The outages work of this worker met since its last run ended, each kind apart (a database back while
   * the bus is still away is said): no sign that they ended. Kept past a run's start, so a sweep run by
   * hand that a run then joins keeps what it met.
   */
  private met = { db: false, bus: false };
  /** A round since the last run asked nothing of the bus (busUnreached): it cannot tell that a bus outage ended. */
  private busUnreachedSince = false;

  constructor(
    private readonly name: string,
    private readonly intervalMs: number,
    private readonly tick: () => Promise<boolean>,
    private readonly log: Logger,
    /** Each round a root span of its own; off where every unit of work carries its own trace (the outbox relay). */
    private readonly traced = true,
  ) {
    this.outage = new OutageLog(log, { worker: name }, { away: 'database unavailable, worker retries every tick', back: 'database back, worker resumed' });
    this.busOutage = new OutageLog(
      log,
      { worker: name },
      { away: 'bus or a service it asks unavailable, worker retries every tick', back: 'bus back, worker resumed' },
      isBusOutage,
    );
  }

  /**
   * An outage met by work a round catches itself, so that one piece failing leaves the rest going on:
   * said once, as for a round that throws, and the run that met it does not say the outage ended. True
   * when `err` is an outage (said); false for any other failure, the caller's to report.
   */
  failed(err: unknown): boolean {
    if (this.outage.failed(err)) return (this.met.db = true);
    if (this.busOutage.failed(err)) return (this.met.bus = true);
    return false;
  }

  /** The round at hand asked nothing of the bus or another service (nothing was due): it says nothing of their outage. */
  busUnreached(): void {
    this.busUnreachedSince = true;
  }

  /** Work of this worker done outside its rounds (a sweep run by hand) reached everything and met no outage: any has ended. */
  ok(): void {
    this.outage.ok();
    this.busOutage.ok();
  }

  /** stop() was called: a long round may end early (stop waits for it). */
  get stopping(): boolean {
    return this.stopped;
  }

  start(): void {
    this.schedule();
  }

  private schedule(): void {
    if (!this.stopped) this.timer = setTimeout(() => (this.running = this.run()), this.intervalMs);
  }

  private async run(): Promise<void> {
    try {
      // Each round is a root span of its own (not part of whatever ran before); what it touches links to it.
      const round = () => (this.traced ? inSpan(`${this.name} sweep`, { root: true }, () => this.tick()) : this.tick());
      while (!this.stopped && (await round()));
      if (!this.met.db) this.outage.ok();
      if (!this.met.bus && !this.busUnreachedSince) this.busOutage.ok();
    } catch (err) {
      if (!this.failed(err)) this.log.warn({ err, worker: this.name }, 'worker tick failed, will retry');
    } finally {
      this.met = { db: false, bus: false };
      this.busUnreachedSince = false;
      this.schedule();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}
