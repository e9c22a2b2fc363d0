import { context, trace, type Link } from '@opentelemetry/api';
import { BusUnavailableError } from './errors.js';
import { isDbUnavailable } from './db.js';
import { inSpan } from './telemetry.js';

interface Waiting<I, O> {
  item: I;
  link?: Link;
  resolve(o: O): void;
  reject(err: unknown): void;
}

export interface BatcherOptions {
  /** Items per call of `run` at most. */
  maxBatch: number;
  /** Calls of `run` under way at once (default 1): items arriving meanwhile wait and make the next batch. */
  maxConcurrent?: number;
  /** Each batch runs in a root span of this name, linked to the span of every caller. */
  span: string;
}

/**
 * Coalesces calls made at about the same time into one call of `run` with all their items: one SQL
 * statement for many rows instead of one round trip per row (socket writes are what costs). While a batch
 * is under way new items wait, so batches grow with the load instead of the round trips. Each caller
 * gets its own result, or an error: when a batch fails, each of its items is run alone, so one bad item
 * fails only its own caller (unless the database or a peer service is away, which every item would meet again).
 */
export class Batcher<I, O> {
  private readonly queue: Waiting<I, O>[] = [];
  private running = 0;
  private scheduled = false;

  constructor(
    /** Returns one result per item, in the order of `items`. */
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly o: BatcherOptions,
  ) {}

  add(item: I): Promise<O> {
    const caller = trace.getSpanContext(context.active());
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, link: caller && { context: caller }, resolve, reject });
      this.kick();
    });
  }

  private kick(): void {
    if (this.scheduled || !this.queue.length || this.running >= (this.o.maxConcurrent ?? 1)) return;
    this.scheduled = true;
    // After the I/O at hand: the callers woken by the same read (responses, messages) join this batch.
    setImmediate(() => {
      this.scheduled = false;
      while (this.queue.length && this.running < (this.o.maxConcurrent ?? 1)) {
        const batch = this.queue.splice(0, this.o.maxBatch);
        this.running++;
        void this.runBatch(batch).finally(() => {
          this.running--;
          this.kick();
        });
      }
    });
  }

  private async runBatch(batch: Waiting<I, O>[]): Promise<void> {
    // Not in the trace of whichever caller came first: a root span of its own, linked to all of them.
    const once = (ws: Waiting<I, O>[]) =>
      inSpan(this.o.span, { root: true, links: ws.flatMap((w) => (w.link ? [w.link] : [])), attributes: { 'batch.size': ws.length } }, () =>
        this.run(ws.map((w) => w.item)),
      );
    try {
      const out = await once(batch);
      for (const [i, w] of batch.entries()) w.resolve(out[i]!);
    } catch (err) {
      // An outage (database or a peer service away) fails every item alike: retrying them one by one
      // would only hold the callers (and their acknowledgement deadlines) for as many timeouts.
      if (batch.length === 1 || isDbUnavailable(err) || err instanceof BusUnavailableError) {
        for (const w of batch) w.reject(err);
        return;
      }
      for (const w of batch) {
        try {
          w.resolve((await once([w]))[0]!);
        } catch (e) {
          w.reject(e);
        }
      }
    }
  }
}
