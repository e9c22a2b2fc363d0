import type { EventEnvelope } from '@sb/contracts';
import { conflict, enqueueEvent, type Queryable } from '@sb/runtime';
import { SCHEMA, type Deps } from './deps.js';
import { transition, type LifecycleEvent } from './domain/lifecycle.js';
import type { SubRow } from './store/subscriptions.repo.js';

/** The WebhookEvent data of a subscription: what an owner's webhook needs without a second call. */
async function subscriptionEventData(d: Deps, q: Queryable, s: SubRow, extra: Record<string, unknown>): Promise<EventEnvelope['data']> {
  const r = await d.subscriptions.eventNames(q, s.plan_id, s.subscriber_id);
  return {
    subscription_id: s.id,
    plan_id: s.plan_id,
    plan_name: r?.plan_name ?? '',
    ...(r?.email ? { subscriber_email: r.email } : {}),
    ...(r?.name ? { subscriber_name: r.name } : {}),
    status: s.status,
    amount_sats: s.amount_sats,
    // What notices say: the period a payment covers, until when a cancelled subscription keeps access, who cancelled.
    current_period_end: s.current_period_end,
    ...(s.cancel_reason ? { cancel_reason: s.cancel_reason } : {}),
    ...extra,
  };
}

export async function emit(d: Deps, q: Queryable, s: SubRow, event: EventEnvelope['event'], extra: Record<string, unknown> = {}): Promise<void> {
  await enqueueEvent(q, SCHEMA, d.clock, s.wallet_id, event, await subscriptionEventData(d, q, s, extra));
}

/**
 * One lifecycle move: the pure transition, one compare-and-set on the row, and its event in the outbox,
 * all inside the caller's transaction. A lost race is 409 and changes nothing.
 */
export async function applyTransition(
  d: Deps,
  q: Queryable,
  sub: SubRow,
  e: LifecycleEvent,
  now: number,
  bookkeeping: Partial<SubRow> = {},
  extra: Record<string, unknown> = {},
): Promise<SubRow> {
  const { next, event } = transition(sub, e, now);
  const row: SubRow = { ...sub, ...next, ...bookkeeping, updated_at: now };
  if (!(await d.subscriptions.save(q, row))) throw conflict('Subscription was changed concurrently; retry');
  const saved = { ...row, version: sub.version + 1 };
  await emit(d, q, saved, event, extra);
  return saved;
}
