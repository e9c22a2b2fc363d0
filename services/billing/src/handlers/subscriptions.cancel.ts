import type { Deps } from '../deps.js';
import { act, ownerSub } from './subscription-action.js';
import { routeHandler } from '@sb/runtime';

export const cancelSubscription = (d: Deps) =>
  routeHandler('subscriptions.cancel', async (req) => {
    const body = req.body ?? {};
    const { saved } = await act(d, ownerSub(d, req), () => ({ type: 'cancel', immediate: body.immediate ?? false, reason: body.reason ?? null }));
    return {
      success: true,
      message: body.immediate
        ? 'Subscription cancelled; access ended now'
        : `Subscription cancelled; access continues until ${new Date(saved.current_period_end * 1000).toISOString()}`,
    };
  });
