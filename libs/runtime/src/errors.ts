/** An expected failure with the HTTP status and detail the client is to see. */
export class DomainError extends Error {
  constructor(
    readonly status: number,
    readonly detail: unknown,
  ) {
    super(typeof detail === 'string' ? detail : `domain error ${status}`);
  }
}

export const notFound = (what: string) => new DomainError(404, `${what} not found`);
export const conflict = (why: string) => new DomainError(409, why);
export const unprocessable = (loc: (string | number)[], msg: string, type = 'value_error') => new DomainError(422, [{ loc, msg, type }]);
