import type { Deps } from '../deps.js';
import { withdrawOpenRenewal } from '../domain/schedule.js';
import { act, asSubscription, ownerSub } from './subscription-action.js';
import { routeHandler } from '@sb/runtime';

/** Paused: the open renewal payment is withdrawn (act expires it at payments), so a resume issues a new one. */
export const pauseSubscription = (d: Deps) =>
  routeHandler('subscriptions.pause', async (req) => asSubscription(await act(d, ownerSub(d, req), () => ({ type: 'pause' }), withdrawOpenRenewal)));
