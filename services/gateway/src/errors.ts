import type { BusErrorReply, ErrorKind, ValidationIssue } from '@sb/contracts';

/** The one place a domain error becomes HTTP: its status, and the `{"detail"}` the interface spec gives it. */
export const HTTP_STATUS: Record<ErrorKind, number> = {
  invalid: 422,
  unauthenticated: 401,
  rejected: 400,
  not_found: 404,
  conflict: 409,
  unavailable: 503,
  internal: 500,
};

export function httpOf(error: BusErrorReply['error']): { status: number; detail: string | ValidationIssue[] } {
  const status = HTTP_STATUS[error.kind];
  if (error.kind === 'invalid' && error.issues?.length) {
    // The field's path is inside the part it came from; the API's `loc` names that part first.
    return { status, detail: error.issues.map((i) => ({ loc: [i.in ?? 'body', ...i.field], msg: i.msg, type: i.type })) };
  }
  return { status, detail: error.message };
}
