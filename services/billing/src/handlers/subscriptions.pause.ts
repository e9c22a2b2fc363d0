import type { Deps } from '../deps.js';
import { act, asSubscription, ownerSub } from './subscription-action.js';
import { routeHandler } from './route-handler.js';

export const pauseSubscription = (d: Deps) =>
  routeHandler('subscriptions.pause', async (req) => asSubscription(await act(d, ownerSub(d, req), () => ({ type: 'pause' }))));
