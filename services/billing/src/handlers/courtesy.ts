import { within } from '@sb/runtime';
import type { Deps } from '../deps.js';

/** How long a courtesy waits; the gateway waits 5 s for the whole answer. */
const COURTESY_DEADLINE_MS = 2_000;

/**
 * Another service's part of an answer that works without it (the notifier's contact methods or merchant
 * name, payments' fiat price): undefined, logged, when it fails or answers late, since a hung service must
 * not make the gateway give up on the whole answer.
 */
export function courtesy<T>(d: Deps, p: Promise<T>, what: string, about: Record<string, string>): Promise<T | undefined> {
  return within(
    p.catch((err) => {
      d.log.warn({ err: String(err), ...about }, `${what} unavailable`);
      return undefined;
    }),
    COURTESY_DEADLINE_MS,
    () => {
      d.log.warn(about, `${what} not answered in ${COURTESY_DEADLINE_MS} ms`);
      return undefined;
    },
  );
}
