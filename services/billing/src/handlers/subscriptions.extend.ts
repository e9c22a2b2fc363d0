import { answerOnce } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { carryOpenRenewal } from '../domain/schedule.js';
import { toSubscription } from '../store/subscriptions.repo.js';
import { act, ownerSub } from './subscription-action.js';

export const extendSubscription = (d: Deps) =>
  answerOnce(d.answered, d.db, 'subscriptions.extend', async (req, keep) => {
    const { reply } = await act(d, ownerSub(d, req), () => ({ type: 'extend', days: req.query.days }), toSubscription, keep, {
      bookkeeping: (s) => carryOpenRenewal(s, req.query.days),
      // Invoices issued for the period still pay it once it is longer: a replaced one paid late renews it.
      also: (tx, before, saved) => d.subscriptions.moveRenewalPeriod(tx, saved.id, before.current_period_end, saved.current_period_end),
    });
    return reply;
  });
