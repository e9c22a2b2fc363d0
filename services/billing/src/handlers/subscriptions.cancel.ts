import { answerOnce } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { act, cancelled, ownerSub } from './subscription-action.js';

export const cancelSubscription = (d: Deps) =>
  answerOnce(d.answered, d.db, 'subscriptions.cancel', async (req, keep) => {
    const body = req.body ?? {};
    const event = () => ({ type: 'cancel' as const, immediate: body.immediate ?? false, by: 'merchant' as const, reason: body.reason ?? null });
    return (await act(d, ownerSub(d, req), event, cancelled, keep)).reply;
  });
