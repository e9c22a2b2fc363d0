import type { Deps } from '../deps.js';
import { act, cancelledMessage, ownerSub } from './subscription-action.js';
import { routeHandler } from '@sb/runtime';

export const cancelSubscription = (d: Deps) =>
  routeHandler('subscriptions.cancel', async (req) => {
    const body = req.body ?? {};
    const { saved, now } = await act(d, ownerSub(d, req), () => ({ type: 'cancel', immediate: body.immediate ?? false, reason: body.reason ?? null }));
    return { success: true, message: cancelledMessage(saved, now) };
  });
