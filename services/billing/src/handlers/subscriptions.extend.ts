import type { Deps } from '../deps.js';
import { act, asSubscription, ownerSub } from './subscription-action.js';
import { routeHandler } from '@sb/runtime';

export const extendSubscription = (d: Deps) =>
  routeHandler('subscriptions.extend', async (req) => asSubscription(await act(d, ownerSub(d, req), () => ({ type: 'extend', days: req.query.days }))));
