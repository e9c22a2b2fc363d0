import { messages, type BusRequest } from '@sb/contracts';
import { callMessage, notFound, type Keep } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { hasAccess, type LifecycleEvent } from '../domain/lifecycle.js';
import type { SubRow } from '../store/subscriptions.repo.js';
import { applyTransition } from '../transitions.js';
import { courtesy } from './courtesy.js';

type Tx = Parameters<Parameters<Deps['db']['tx']>[0]>[0];

/**
 * An owner or subscriber action on one subscription: locate it within the caller's scope (404 outside),
 * apply the lifecycle move, and expire its open payments when it leaves billing. `also` writes what the
 * move implies elsewhere, in the same transaction; so is the answer kept for a retry (`keep`, answerOnce).
 */
export async function act<A>(
  d: Deps,
  find: (tx: Tx) => Promise<SubRow | undefined>,
  event: (s: SubRow, now: number) => LifecycleEvent,
  answer: (saved: SubRow, now: number) => A,
  keep: Keep,
  more: {
    bookkeeping?: (s: SubRow, now: number) => Partial<SubRow>;
    also?: (tx: Tx, before: SubRow, saved: SubRow) => Promise<void>;
  } = {},
) {
  // One reading of the clock: the move's milliseconds order it against a payment of the same second.
  const nowMs = d.clock.nowMs();
  const now = Math.floor(nowMs / 1000);
  const { before, saved, reply } = await d.db.tx(async (tx) => {
    const sub = await find(tx);
    if (!sub) throw notFound('Subscription');
    const saved = await applyTransition(d, tx, sub, { ...event(sub, now), at_ms: nowMs }, now, more.bookkeeping?.(sub, now) ?? {});
    await more.also?.(tx, sub, saved);
    return { before: sub, saved, reply: await keep(tx, answer(saved, now)) };
  });
  // Best effort: an open renewal invoice must not be paid for a subscription that stopped billing; the
  // payments sweeper expires it by time anyway. A pause withdraws only the invoice it saw: a resume
  // committed since may already have issued the next one, which must stay payable. A hung payments
  // service is not waited for: the move is made, and the answer must not say it failed.
  const withdraw =
    saved.status === 'cancelled' ? {} : saved.status === 'paused' && before.renewal_payment_id ? { payment_id: before.renewal_payment_id } : null;
  if (withdraw) {
    await courtesy(
      d,
      callMessage(d.bus, messages.expireOpenPayments, { wallet_id: saved.wallet_id, subscription_id: saved.id, ...withdraw }),
      'expiring open payments',
      {
        subscription_id: saved.id,
      },
    );
  }
  return { saved, now, reply };
}

export const ownerSub = (d: Deps, req: BusRequest<{ id: string }>) => (tx: Tx) => d.subscriptions.get(tx, req.caller.wallet_id!, req.params.id, true);

/** The cancel answer: until when access remains, or that none does (at once, or never paid). */
export function cancelled(saved: SubRow, now: number) {
  const message = hasAccess(saved, now)
    ? `Subscription cancelled; access continues until ${new Date(saved.current_period_end * 1000).toISOString()}`
    : 'Subscription cancelled; no access remains';
  return { success: true as const, message };
}
