import { isDbUnavailable } from './db.js';
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
  /** The database was away at the last tick: logged once, not at every tick of the outage. */
  private dbAway = false;

  constructor(
    private readonly name: string,
    private readonly intervalMs: number,
    private readonly tick: () => Promise<boolean>,
    private readonly log: Logger,
    /** Each round a root span of its own; off where every unit of work carries its own trace (the outbox relay). */
    private readonly traced = true,
  ) {}

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
      if (this.dbAway) this.log.info({ worker: this.name }, 'database back, worker resumed');
      this.dbAway = false;
    } catch (err) {
      const away = isDbUnavailable(err);
      if (!away || !this.dbAway)
        this.log.warn({ err, worker: this.name }, away ? 'database unavailable, worker retries every tick' : 'worker tick failed, will retry');
      this.dbAway = away;
    } finally {
      this.schedule();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}
