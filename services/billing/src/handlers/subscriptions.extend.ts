import { routeHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { carryOpenRenewal } from '../domain/schedule.js';
import { act, asSubscription, ownerSub } from './subscription-action.js';

export const extendSubscription = (d: Deps) =>
  routeHandler('subscriptions.extend', async (req) =>
    asSubscription(
      await act(
        d,
        ownerSub(d, req),
        () => ({ type: 'extend', days: req.query.days }),
        (s) => carryOpenRenewal(s, req.query.days),
      ),
    ),
  );
