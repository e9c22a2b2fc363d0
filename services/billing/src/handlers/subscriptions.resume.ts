import { answerOnce } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { resumeBookkeeping } from '../domain/schedule.js';
import { toSubscription } from '../store/subscriptions.repo.js';
import type { Scheduler } from '../scheduler.js';
import { act, ownerSub } from './subscription-action.js';

/**
 * Resumed after the paid period ended: back to pending with a renewal payment made at once, which an NWC
 * subscription's wallet is asked to pay at once (behaviour.md). The resume stands once committed: a
 * payment that cannot be made now (the payments service away) is made by the scheduler shortly after,
 * so the answer is the subscription either way. Resumed inside the renewal lead time, the renewal
 * payment the pause withdrew is reissued (with its reminder) at once.
 */
export const resumeSubscription = (d: Deps, scheduler: Scheduler) =>
  answerOnce(d.answered, d.db, 'subscriptions.resume', async (req, keep) => {
    const { saved, now, reply } = await act(d, ownerSub(d, req), () => ({ type: 'resume' }), toSubscription, keep, { bookkeeping: resumeBookkeeping });
    if (saved.status === 'pending') {
      await scheduler
        .issueResumePayment(saved, now)
        .catch((err) => d.log.warn({ err, subscription_id: saved.id }, 'resume: renewal payment not made; the scheduler makes it'));
    }
    // Whatever is due now (a renewal payment inside the lead time) goes out before the answer.
    if (saved.status === 'active') await scheduler.runFor(saved.id);
    return reply;
  });
