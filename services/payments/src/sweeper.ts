import { Poller, unixSeconds } from '@sb/runtime';
import type { Deps } from './deps.js';
import type { Rail } from './providers/rail.js';
import { settleFromProvider, tellBillingOfEnd } from './confirm.js';
import { statesAllowing } from './domain/payments.js';

interface SweeperOptions {
  intervalMs: number;
  /** Payments expired per statement. */
  expireBatch?: number;
  /** Provider status reads per tick. */
  checkBatch?: number;
  /** No payment is asked about again sooner than this (seconds). */
  recheckAfterS?: number;
  /** How long after expiry a payment is still asked about (a late payment whose callback was lost); a rail may set its own. */
  lateWindowS?: number;
  /** Provider reads in flight at once. */
  concurrency?: number;
  /** Billing is told again of a renewal payment's early end no sooner than this (seconds). */
  endNoticeRetryS?: number;
}

/**
 * The background work of the service, every `intervalMs`: (1) asks the provider about open payments and
 * confirms the paid ones, so a lost callback never loses a payment; (2) expires pending payments past
 * `expires_at`. Both claim their rows atomically (SKIP LOCKED), so any number of replicas sweep together
 * without waiting on each other or doing a row twice. All time comes from the injected clock.
 */
export class Sweeper {
  private stopped = false;
  private readonly o: Required<SweeperOptions>;
  private readonly poller: Poller;

  constructor(
    private readonly d: Deps,
    opts: SweeperOptions,
  ) {
    this.o = { expireBatch: 500, checkBatch: 25, recheckAfterS: 10, lateWindowS: 86_400, concurrency: 5, endNoticeRetryS: 30, ...opts };
    this.poller = new Poller('sweeper', this.o.intervalMs, async () => (await this.tick(), false), d.log);
  }

  start(): void {
    this.poller.start();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.poller.stop();
  }

  /** One sweep; returns what it did (for tests and logs). */
  async tick(): Promise<{ confirmed: number; expired: number }> {
    const confirmed = await this.checkProvider();
    const expired = await this.expireDue();
    await this.tellBilling();
    return { confirmed, expired };
  }

  /**
   * Early ends of renewal payments billing has not confirmed hearing of (it was away, or this replica
   * crashed before asking). The first failure ends the pass: billing away would make each of the others
   * wait the bus timeout in turn, holding up the tick; they were claimed, so they come again after the retry time.
   */
  private async tellBilling(): Promise<void> {
    const due = await this.d.payments.claimEndNotices(this.d.db, unixSeconds(this.d.clock), this.o.endNoticeRetryS, this.o.checkBatch);
    for (const p of due) {
      if (this.stopped) break;
      try {
        await tellBillingOfEnd(this.d, p);
      } catch (err) {
        this.d.log.warn({ err, payment_id: p.id, left: due.length - due.indexOf(p) - 1 }, 'sweeper: billing not told of the early end yet');
        break;
      }
    }
  }

  private async expireDue(): Promise<number> {
    const { from, to } = statesAllowing('expire');
    let total = 0;
    for (;;) {
      const ids = await this.d.payments.expireDue(this.d.db, unixSeconds(this.d.clock), from, to, this.o.expireBatch);
      total += ids.length;
      if (ids.length < this.o.expireBatch || this.stopped) break;
    }
    if (total) this.d.log.info({ expired: total }, 'sweeper: payments expired');
    return total;
  }

  /** Each provider that can be asked (the dev provider cannot: it is paid only through the dev endpoint). */
  private async checkProvider(): Promise<number> {
    let confirmed = 0;
    // Per rail, not per provider: one charge server serves Lightning and on-chain with different late windows.
    for (const rail of Object.values(this.d.rails)) if (rail?.status) confirmed += await this.checkRail(rail);
    return confirmed;
  }

  private async checkRail(rail: Rail): Promise<number> {
    const claimed = await this.d.payments.claimForCheck(
      this.d.db,
      rail.provider,
      rail.method,
      unixSeconds(this.d.clock),
      rail.recheckAfterS ?? this.o.recheckAfterS,
      rail.lateWindowS ?? this.o.lateWindowS,
      this.o.checkBatch,
    );
    let confirmed = 0;
    const queue = [...claimed];
    const worker = async () => {
      for (let p = queue.shift(); p && !this.stopped; p = queue.shift()) {
        try {
          if ((await settleFromProvider(this.d, p, await rail.status!(p), 'sweeper')).changed === 'paid') confirmed++;
        } catch (err) {
          this.d.log.warn({ err, payment_id: p.id }, 'sweeper: provider check failed');
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.o.concurrency, queue.length) }, worker));
    return confirmed;
  }
}
