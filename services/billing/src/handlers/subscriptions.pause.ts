import { answerOnce } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { withdrawOpenRenewal } from '../domain/schedule.js';
import { toSubscription } from '../store/subscriptions.repo.js';
import { act, ownerSub } from './subscription-action.js';

/** Paused: the open renewal payment is withdrawn (act expires it at payments), so a resume issues a new one. */
export const pauseSubscription = (d: Deps) =>
  answerOnce(
    d.answered,
    d.db,
    'subscriptions.pause',
    async (req, keep) => (await act(d, ownerSub(d, req), () => ({ type: 'pause' }), toSubscription, keep, { bookkeeping: withdrawOpenRenewal })).reply,
  );
