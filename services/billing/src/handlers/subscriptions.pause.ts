import type { Deps } from '../deps.js';
import { act, asSubscription, ownerSub } from './subscription-action.js';
import { routeHandler } from '@sb/runtime';

export const pauseSubscription = (d: Deps) =>
  routeHandler('subscriptions.pause', async (req) => asSubscription(await act(d, ownerSub(d, req), () => ({ type: 'pause' }))));
