import type { BusErrorReply, ErrorKind, FieldIssue } from '@sb/contracts';

/**
 * An expected failure in the domain's words: what kind it is, a sentence for the person who sees it,
 * and the fields at fault. It knows nothing of HTTP: the gateway alone maps the kind to a status
 * (services/gateway/src/errors.ts).
 */
export class DomainError extends Error {
  constructor(
    readonly kind: ErrorKind,
    message: string,
    readonly issues?: FieldIssue[],
  ) {
    super(message);
  }

  /** How it travels on the bus (and is raised again, as itself, by callMessage). */
  toReply(): BusErrorReply['error'] {
    return { kind: this.kind, message: this.message, ...(this.issues ? { issues: this.issues } : {}) };
  }
}

export const notFound = (what: string) => new DomainError('not_found', `${what} not found`);
export const conflict = (why: string) => new DomainError('conflict', why);
/** The caller's credentials name nobody (an unknown subscriber token). */
export const unauthenticated = (why: string) => new DomainError('unauthenticated', why);
/** A request that cannot be taken as sent (an unverifiable provider callback). */
export const rejected = (why: string) => new DomainError('rejected', why);
/** One field of the input is wrong; `field` is its path inside the request's body. */
export const invalid = (field: (string | number)[], msg: string, type = 'value_error') => new DomainError('invalid', msg, [{ field, msg, type }]);
/** Several fields are wrong at once. */
export const invalidFields = (issues: FieldIssue[]) => new DomainError('invalid', issues.map((i) => i.msg).join('; '), issues);
/** Something this request needs is down for now (a provider, a peer): worth retrying. */
export const unavailable = (why: string) => new DomainError('unavailable', why);
/** Not found, in a sentence of the caller's own. */
export const notFoundAs = (sentence: string) => new DomainError('not_found', sentence);

/**
 * The request could not be answered: no service listens on the subject (`noResponders`: NATS says so at
 * once), the peer did not answer in time, or the bus itself is unreachable. The gateway answers 503.
 */
export class BusUnavailableError extends Error {
  constructor(
    message: string,
    readonly noResponders = false,
    /** The NATS server refused to publish the request (its permissions): nobody got it. */
    readonly refused = false,
  ) {
    super(message);
  }
}
