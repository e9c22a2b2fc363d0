import { within } from '@sb/runtime';
import type { Deps } from '../deps.js';

/** How long a courtesy waits; the gateway waits 5 s for the whole answer. */
const COURTESY_DEADLINE_MS = 2_000;

/**
 * How long a courtesy read that went unanswered is not asked again: a hung service would otherwise cost
 * every plan page (and checkout) the whole deadline. Its late answer, when it comes, ends this early.
 */
const COURTESY_REST_MS = 5_000;

/** Per courtesy read (its `what`): until when it is not asked (this process). */
const resting = new Map<string, number>();

/**
 * Another service's part of an answer that works without it (the notifier's contact methods or merchant
 * name, payments' fiat price): undefined, logged once, when it fails or answers late, since a hung service
 * must not make the gateway give up on the whole answer.
 */
export function courtesy<T>(d: Deps, p: Promise<T>, what: string, about: Record<string, string>, onLate?: () => void): Promise<T | undefined> {
  // A late call fails later still (the bus timeout): that is the same failure, already logged.
  let late = false;
  return within(
    p.catch((err) => {
      if (!late) d.log.warn({ err: String(err), ...about }, `${what} unavailable`);
      return undefined;
    }),
    COURTESY_DEADLINE_MS,
    () => {
      late = true;
      onLate?.();
      d.log.warn(about, `${what} not answered in ${COURTESY_DEADLINE_MS} ms`);
      return undefined;
    },
  );
}

/**
 * `courtesy` for a read that changes nothing (so it may be left out): after one went unanswered, the
 * same read is not asked for COURTESY_REST_MS, or until that late one is answered after all.
 */
export function courtesyRead<T>(d: Deps, ask: () => Promise<T>, what: string, about: Record<string, string>): Promise<T | undefined> {
  const until = resting.get(what);
  if (until !== undefined && Date.now() < until) return Promise.resolve(undefined);
  const p = ask();
  p.then(
    () => resting.delete(what),
    () => undefined,
  );
  return courtesy(d, p, what, about, () => resting.set(what, Date.now() + COURTESY_REST_MS));
}
