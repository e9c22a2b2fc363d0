import { type Logger, Poller } from '@sb/runtime';

/** What a ClaimingWorker claims and does. */
export interface ClaimedWork<Row> {
  /** Pieces under way at once (each waits on a server elsewhere, not on this process). */
  inFlight: number;
  /** Pieces claimed at a time, as soon as this many of those under way are done. */
  claim: number;
  /**
   * Claims (and leases) up to `want` due pieces, never one of `running`: a piece still under way here
   * past its lease is not started a second time beside itself (found in review).
   */
  claimDue: (want: number, running: readonly string[]) => Promise<Row[]>;
  idOf: (row: Row) => string;
  /** Does one piece and records how it went. */
  run: (row: Row) => Promise<void>;
  /** A piece whose outcome could not be recorded (its claim ends and it is done again); the poller is the worker's. */
  failed: (err: unknown, row: Row, poller: Poller) => void;
}

/**
 * Claims due work for the free places and runs each piece on its own: a slow server elsewhere (a
 * webhook receiver, a mail server that accepts and never greets) holds up its own pieces, not a whole
 * round of others (found from outside: one hung SMTP server delayed every channel's notices by its
 * timeout, round after round).
 */
export class ClaimingWorker<Row> {
  private readonly running = new Set<Promise<void>>();
  private readonly runningIds = new Set<string>();
  readonly poller: Poller;

  constructor(
    name: string,
    intervalMs: number,
    log: Logger,
    private readonly work: ClaimedWork<Row>,
  ) {
    this.poller = new Poller(name, intervalMs, () => this.round(), log);
  }

  /**
   * Claims due pieces for the free places and starts them (waiting first for `claim` places to free
   * up); true when it claimed all it asked for (more may be due).
   */
  async round(): Promise<boolean> {
    const { inFlight, claim } = this.work;
    while (this.running.size > inFlight - claim) await Promise.race(this.running);
    const want = inFlight - this.running.size;
    const due = await this.work.claimDue(want, [...this.runningIds]);
    for (const row of due) {
      const id = this.work.idOf(row);
      const one: Promise<void> = this.work
        .run(row)
        .catch((err) => this.work.failed(err, row, this.poller))
        .finally(() => {
          this.running.delete(one);
          this.runningIds.delete(id);
        });
      this.running.add(one);
      this.runningIds.add(id);
    }
    return due.length === want;
  }

  start(): void {
    this.poller.start();
  }

  /** Stops claiming, then waits for the pieces under way (each ends within its own timeout) and their recording. */
  async stop(): Promise<void> {
    await this.poller.stop();
    while (this.running.size) await Promise.all(this.running);
  }
}
