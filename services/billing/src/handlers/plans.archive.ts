import { messages } from '@sb/contracts';
import { callMessage, conflict, enqueueEvent, notFound, routeHandler, walletOf } from '@sb/runtime';
import { SCHEMA, type Deps } from '../deps.js';
import { archivePlan } from '../domain/plans.js';
import { applyTransition, emit } from '../transitions.js';

/**
 * Archiving is idempotent: the first call flips the flag, cancels every live subscription of the plan
 * (access to the end of the paid period) and records one `subscription.cancelled` and one `plan.archived`
 * per subscription (a lone `plan.archived` when there were none: its webhooks carry `subscription_id` '',
 * see webhookBody) in the same transaction; later calls answer the same (the archived plan and how many
 * subscriptions it cancelled) and emit nothing.
 */
export const archivePlanHandler = (d: Deps) =>
  routeHandler('plans.archive', async (req) => {
    const cancelledIds: string[] = [];
    const result = await d.db.tx(async (tx) => {
      const wallet = walletOf(req);
      // Another wallet's plan is not found before anything waits on it.
      if (!(await d.plans.get(tx, wallet, req.params.id))) throw notFound('Plan');
      // Checkouts under way finish first (their subscriptions are cancelled below); later ones see the plan gone.
      await d.plans.lockForArchive(tx, req.params.id);
      const current = await d.plans.get(tx, wallet, req.params.id, true);
      if (!current) throw notFound('Plan');
      const { version, ...plan } = current;
      const nowMs = d.clock.nowMs();
      const now = Math.floor(nowMs / 1000);
      const { plan: archived, changed } = archivePlan(plan, now);
      if (!changed) return { ...archived, cancelled_subscriptions: await d.subscriptions.countCancelledByArchive(tx, archived.id) };
      if (!(await d.plans.update(tx, archived, version, now))) throw conflict('Plan was changed concurrently; retry');
      const cancelledSubs = [];
      for (const sub of await d.subscriptions.liveOfPlan(tx, archived.id)) {
        cancelledSubs.push(await applyTransition(d, tx, sub, { type: 'plan_archived', at_ms: nowMs }, now, {}, { notify_subscriber: true }));
        cancelledIds.push(sub.id);
      }
      const planEvent = { status: 'archived', cancelled_subscriptions: cancelledSubs.length };
      // The WebhookEvent names a subscription: one event per subscription the archive ended, or one for the plan alone.
      for (const sub of cancelledSubs) await emit(d, tx, sub, 'plan.archived', planEvent);
      if (!cancelledSubs.length) {
        await enqueueEvent(tx, SCHEMA, d.clock, wallet, 'plan.archived', {
          plan_id: archived.id,
          plan_name: archived.name,
          amount_sats: archived.amount_sats,
          ...planEvent,
        });
      }
      return { ...archived, cancelled_subscriptions: cancelledSubs.length };
    });
    for (const id of cancelledIds) {
      await callMessage(d.bus, messages.expireOpenPayments, { wallet_id: result.wallet, subscription_id: id }).catch((err) =>
        d.log.warn({ err, subscription_id: id }, 'could not expire open payments'),
      );
    }
    return result;
  });
