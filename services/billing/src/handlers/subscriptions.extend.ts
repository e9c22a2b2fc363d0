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
        // Invoices issued for the period still pay it once it is longer: a replaced one paid late renews it.
        (tx, before, saved) => d.subscriptions.moveRenewalPeriod(tx, saved.id, before.current_period_end, saved.current_period_end),
      ),
    ),
  );
