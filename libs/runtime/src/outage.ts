import { isDbUnavailable } from './db.js';
import type { Logger } from './logger.js';

/**
 * Says a database outage once when a worker first meets it and once when its work goes through again,
 * not once per failed piece of work: a hundred deliveries under way each failing on the same dead
 * connection are one fact. The outage is said by the error's message: its stack only repeats the
 * driver's internals on every line, and it is expected (unexpected errors keep their stacks).
 */
export class DbOutageLog {
  private away = false;

  constructor(
    private readonly log: Pick<Logger, 'warn' | 'info'>,
    /** Fields of both lines (which worker). */
    private readonly fields: Record<string, unknown>,
    private readonly say: { away: string; back: string },
  ) {}

  /** True when `err` is the database being away (said if it is the first of this outage); false otherwise, not said. */
  failed(err: unknown): boolean {
    if (!isDbUnavailable(err)) return false;
    if (!this.away) this.log.warn({ ...this.fields, error: errorMessage(err) }, this.say.away);
    this.away = true;
    return true;
  }

  /** Work reached the database: the end of an outage is said once. */
  ok(): void {
    if (!this.away) return;
    this.away = false;
    this.log.info(this.fields, this.say.back);
  }
}

/** The driver's words (errno, address, server message); an AggregateError (every address of "localhost") says its first. */
function errorMessage(err: unknown): string {
  const e = err as { message?: unknown; errors?: unknown[] };
  const first = Array.isArray(e?.errors) ? (e.errors[0] as { message?: unknown } | undefined) : undefined;
  return String((e?.message || first?.message) ?? err);
}
