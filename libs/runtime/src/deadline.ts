import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Room for the clocks of two hosts and the reply's way back: a change is given up this long before the
 * caller's `answer_by`, so that one the caller was told failed (503, "please retry") was not made. At most
 * a fifth of the time left when the request arrives (a short BUS_TIMEOUT_MS is not eaten by it, found in
 * review).
 */
export const CALLER_DEADLINE_MARGIN_MS = 500;

/** The caller of the request being handled stopped waiting: its change is not committed (the retry makes it). */
export class CallerGoneError extends Error {
  constructor() {
    super('the caller stopped waiting for this request; nothing was committed');
  }
}

const deadlines = new AsyncLocalStorage<{ by: number; open: boolean }>();

/**
 * Runs a request's handler under its caller's deadline (found from outside: a request held in a queue
 * while billing or its database stalled was committed after the gateway had answered 503 "please
 * retry", and the retry extended a subscription twice). A request that arrives too late is not started;
 * a transaction of it that reaches COMMIT too late rolls back (assertCallerWaits). Work the handler left
 * running after it answered is not held to it.
 */
export async function withCallerDeadline<T>(answerBy: number | undefined, fn: () => Promise<T>): Promise<T> {
  if (answerBy === undefined) return fn();
  const left = answerBy - Date.now();
  if (left <= 0) throw new CallerGoneError();
  const ctx = { by: answerBy - Math.min(CALLER_DEADLINE_MARGIN_MS, left / 5), open: true };
  try {
    return await deadlines.run(ctx, fn);
  } finally {
    ctx.open = false;
  }
}

/** Throws CallerGoneError when the request this runs for has been given up by its caller. */
export function assertCallerWaits(): void {
  const ctx = deadlines.getStore();
  if (ctx?.open && Date.now() >= ctx.by) throw new CallerGoneError();
}
