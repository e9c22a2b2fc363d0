import { isDbUnavailable } from './db.js';
import { BusUnavailableError, DomainError } from './errors.js';
import type { Logger } from './logger.js';

/** The bus away, or a service a request needs not running or answering 503: as expected as the database away. */
export const isBusOutage = (err: unknown): boolean => err instanceof BusUnavailableError || (err instanceof DomainError && err.kind === 'unavailable');

/**
 * Says an outage (by default the database's; `matches` picks another kind) once when a worker first meets it and once when its work goes through again,
 * not once per failed piece of work: a hundred deliveries under way each failing on the same dead
 * connection are one fact. The outage is said by the error's message: its stack only repeats the
 * driver's internals on every line, and it is expected (unexpected errors keep their stacks).
 */
export class OutageLog {
  private away = false;

  constructor(
    private readonly log: Pick<Logger, 'warn' | 'info'>,
    /** Fields of both lines (which worker). */
    private readonly fields: Record<string, unknown>,
    private readonly say: { away: string; back: string },
    private readonly matches: (err: unknown) => boolean = isDbUnavailable,
  ) {}

  /** True when `err` is the outage this log says (said if it is the first of this outage); false otherwise, not said. */
  failed(err: unknown): boolean {
    if (!this.matches(err)) return false;
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
