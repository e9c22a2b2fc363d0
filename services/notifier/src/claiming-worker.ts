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
  claimDue: (want: number, running: readonly string[], busy: ReadonlyMap<string, number>) => Promise<Row[]>;
  idOf: (row: Row) => string;
  /**
   * Where a piece goes (a webhook endpoint), and how many of a group may be under way at once, so that one
   * that never answers holds up its own pieces only. How many each group has under way here is passed to
   * claimDue as `busy`, which claims no more than the rest of `perGroup`.
   */
  groupOf?: (row: Row) => string;
  perGroup?: number;
  /**
   * A group whose last piece ran into its timeout (`run` said so) is claimed for as if it had
   * `perGroup - share` more under way, for `forMs` or until a piece of it ends in time: a server that never
   * answers learns to hold a few places, not a whole share, each for the whole timeout.
   */
  slow?: { share: number; forMs: number };
  /** Does one piece and records how it went; resolves `true` when it ran into its timeout (see `slow`). */
  run: (row: Row) => Promise<unknown>;
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
  /** Pieces under way per group (groupOf). */
  private readonly groups = new Map<string, number>();
  /**
   * Groups whose last piece ran into its timeout, until when. In this process only (another replica
   * learns it from its own pieces).
   */
  private readonly slowUntil = new Map<string, number>();
  readonly poller: Poller;

  constructor(
    name: string,
    private readonly intervalMs: number,
    log: Logger,
    private readonly work: ClaimedWork<Row>,
  ) {
    this.poller = new Poller(name, intervalMs, () => this.round(), log);
  }

  /**
   * Claims due pieces for the free places and starts them (waiting first for `claim` places to free
   * up); true when it claimed any, or a group is at its share (more may be due).
   */
  async round(): Promise<boolean> {
    const { inFlight, claim, groupOf, perGroup = Number.POSITIVE_INFINITY } = this.work;
    while (this.running.size > inFlight - claim) await Promise.race(this.running);
    // Held back by a group's share: claimed again once half a share of pieces ended (one fast receiver
    // is not held to the poll interval, found by the benchmark), or after the interval at the latest
    // (a share of receivers that never answer holds nobody else up).
    if (this.atShare(perGroup)) await this.ended(Math.ceil(perGroup / 2), this.intervalMs);
    const want = inFlight - this.running.size;
    const due = await this.work.claimDue(want, [...this.runningIds], this.busy());
    for (const row of due) {
      const id = this.work.idOf(row);
      const group = groupOf?.(row);
      const one: Promise<void> = this.work
        .run(row)
        .then((timedOut) => {
          if (group !== undefined) this.mark(group, timedOut === true);
        })
        .catch((err) => this.work.failed(err, row, this.poller))
        .finally(() => {
          this.running.delete(one);
          this.runningIds.delete(id);
          if (group !== undefined) {
            const left = (this.groups.get(group) ?? 1) - 1;
            if (left > 0) this.groups.set(group, left);
            else this.groups.delete(group);
          }
        });
      this.running.add(one);
      this.runningIds.add(id);
      if (group !== undefined) this.groups.set(group, (this.groups.get(group) ?? 0) + 1);
    }
    // Any claimed: more may have come due meanwhile (deliveries are made as events arrive; found by the
    // benchmark: a claim of fewer than wanted slept the poll interval with more coming in, 850/s against
    // 1,555/s with only a claim's worth taken as more to come). The next round that finds none sleeps.
    return due.length > 0 || this.atShare(perGroup);
  }

  /**
   * Some group has its whole share under way: more of it may be due, claimable as its pieces end. Counted
   * as they are, not as `busy` counts a slow group: its few pieces end only at their timeout, and a round
   * that waited on them held every other group's pieces for the poll interval (found in review).
   */
  private atShare(perGroup: number): boolean {
    for (const n of this.groups.values()) if (n >= perGroup) return true;
    return false;
  }

  private mark(group: string, timedOut: boolean): void {
    if (timedOut && this.work.slow) this.slowUntil.set(group, Date.now() + this.work.slow.forMs);
    else this.slowUntil.delete(group);
  }

  /** Pieces under way per group as the claim is to count them: a slow group's share made `slow.share`. */
  private busy(): ReadonlyMap<string, number> {
    const { slow, perGroup } = this.work;
    if (!slow || perGroup === undefined || this.slowUntil.size === 0) return this.groups;
    const counted = new Map(this.groups);
    const now = Date.now();
    for (const [group, until] of this.slowUntil) {
      if (until <= now) this.slowUntil.delete(group);
      else counted.set(group, (this.groups.get(group) ?? 0) + perGroup - slow.share);
    }
    return counted;
  }

  /** Until `n` of the pieces under way now have ended (all, if fewer), or `ms` passed. */
  private async ended(n: number, ms: number): Promise<void> {
    const until = Math.max(0, this.running.size - n);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((r) => (timer = setTimeout(r, ms)));
    let done = false;
    void late.then(() => (done = true));
    while (!done && this.running.size > until) await Promise.race([late, ...this.running]);
    clearTimeout(timer);
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
