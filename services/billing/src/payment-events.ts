import { PaymentEventData, messages, type EventEnvelope } from '@sb/contracts';
import { BusUnavailableError, callMessage, enqueueEvent, idTimeMs, unixSeconds } from '@sb/runtime';
import { SCHEMA, type Deps } from './deps.js';
import { applicationOf } from './domain/payment-application.js';
import { awaitingFirstPayment } from './domain/schedule.js';
import { applyTransition, emit, fiatCharged } from './transitions.js';

type Outcome = {
  result: 'applied' | 'unapplied' | 'duplicate';
  /** A renewal invoice replaced by the one paid late: withdrawn so it is not paid a second time. */
  withdraw?: string | null;
  /** The contact's pending checkout activated by a late payment: its own checkout payment is withdrawn. */
  withdrawCheckoutOf?: string | null;
  /**
   * That checkout is another one than the payment's own, never paid before: its invoices that ran out
   * already are named too (not a resumed subscription's old ones, nor those of the payment's own checkout).
   */
  nameExpired?: boolean;
  unapplied?: string | null;
  /** The period an applied payment paid for (absent: applied by an earlier version). */
  period?: { start: number; end: number } | null;
};

/**
 * Records each paid payment exactly once: applied to a subscription (domain/payment-application.ts
 * decides which), or not applied, with a `payment.unapplied` event for the owner and the reason on the
 * payment. The payment id is recorded in `applied_payments` in the same transaction as the move, and the
 * message is acknowledged only after commit, so a crash replays it and the replay changes nothing (it
 * only repeats the calls to the payments service, which are idempotent).
 */
export async function applyPaymentEvent(d: Deps, envelope: EventEnvelope): Promise<Outcome['result'] | 'ignored'> {
  const p = PaymentEventData.parse(envelope.data);
  if (p.status !== 'paid') return 'ignored';
  const outcome = await d.db.tx(async (tx): Promise<Outcome> => {
    const now = unixSeconds(d.clock);
    if (!(await d.appliedPayments.claim(tx, p.payment_id, p.subscription_id, now))) {
      const r = await d.appliedPayments.get(tx, p.payment_id);
      return {
        result: 'duplicate',
        withdraw: r?.withdraw_payment_id,
        withdrawCheckoutOf: r?.withdraw_checkout ? r.subscription_id : null,
        unapplied: r?.unapplied_reason,
        period: r?.period_start != null && r.period_end != null ? { start: r.period_start, end: r.period_end } : null,
      };
    }
    // Shared with checkouts, exclusive for an archive: an archive committed before this is seen below,
    // and one after it cancels what this activates.
    await d.plans.lockForCheckout(tx, p.plan_id);
    const own = await d.subscriptions.get(tx, envelope.wallet_id, p.subscription_id, true);
    const other = own && (await d.subscriptions.liveOf(tx, own.subscriber_id, own.plan_id));
    const live = other && other.id !== own.id ? await d.subscriptions.get(tx, envelope.wallet_id, other.id, true) : undefined;
    const forCurrent =
      !!own && (own.renewal_payment_id === p.payment_id || (await d.subscriptions.renewalPeriodOf(tx, p.payment_id)) === own.current_period_end);
    const paidAt = p.paid_at ?? now;
    // payment.received is written in the transaction that records the payment, its id made at that
    // instant (payments' confirm.ts): the payment's milliseconds, for a move in the same second.
    const paidMs = p.paid_at != null ? idTimeMs(envelope.id, 'evt_') : null;
    const app = applicationOf(
      { purpose: p.purpose, amount_sats: p.amount_sats, paid_at: paidAt, paid_at_ms: paidMs, for_current_period: forCurrent },
      own,
      live,
      d.policy,
      { archived: await d.plans.archived(tx, p.plan_id) },
    );

    if (app.to === 'none') {
      await d.appliedPayments.setUnapplied(tx, p.payment_id, app.reason);
      const extra = { payment_id: p.payment_id, amount_sats: p.amount_sats, payment_method: p.payment_method, reason: app.reason };
      if (own) await emit(d, tx, own, 'payment.unapplied', extra);
      else
        await enqueueEvent(tx, SCHEMA, d.clock, envelope.wallet_id, 'payment.unapplied', {
          subscription_id: p.subscription_id,
          status: 'unknown',
          plan_id: p.plan_id,
          plan_name: p.plan_name,
          ...extra,
        });
      d.log.warn({ payment_id: p.payment_id, subscription_id: p.subscription_id, reason: app.reason }, 'paid payment recorded as not applied');
      return { result: 'unapplied', unapplied: app.reason };
    }
    const target = app.to === 'own' ? own! : live!;
    // Activation and renewal confirm the payment to the subscriber when they opted into confirmations.
    const extra = {
      payment_id: p.payment_id,
      amount_sats: p.amount_sats,
      // A receipt says what was charged: the fiat amount of a card or wallet-processor payment.
      ...fiatCharged(p),
      payment_method: p.payment_method,
      notify_subscriber: target.receive_confirmations,
      ...(target.id !== p.subscription_id ? { paid_for_subscription_id: p.subscription_id } : {}),
    };
    const saved = await applyTransition(d, tx, target, app.event, now, { renewal_payment_id: null, renewal_expires_at: null, nwc_charging_since: null }, extra);
    // What it paid for: the period it started or renewed to (paused or cancelled meanwhile: the same).
    const period = { start: saved.current_period_start, end: saved.current_period_end };
    await d.appliedPayments.setPeriod(tx, p.payment_id, period);
    // A checkout's own invoice paid late: a fresh one made after it (the checkout page's, the portal's) is
    // withdrawn too (found from outside: left payable, and paid, not applied).
    if (app.to === 'contact_pending' || (app.event.type === 'first_payment' && awaitingFirstPayment(target))) {
      await d.appliedPayments.setActivatedCheckout(tx, p.payment_id, target.id);
      // A subscription pending since a resume has a renewal invoice open, already sent to the subscriber
      // (found in review: left payable once the checkout filter came in).
      const resumeInvoice = target.renewal_payment_id !== null && target.renewal_payment_id !== p.payment_id ? target.renewal_payment_id : null;
      if (resumeInvoice) await d.appliedPayments.setWithdraw(tx, p.payment_id, resumeInvoice);
      const nameExpired = app.to === 'contact_pending' && awaitingFirstPayment(target);
      return { result: 'applied', withdrawCheckoutOf: target.id, withdraw: resumeInvoice, period, nameExpired };
    }
    // The open replacement of a renewal paid late through an older invoice must not be paid a second time.
    const withdraw =
      app.event.type === 'renewal_payment' && target.renewal_payment_id !== null && target.renewal_payment_id !== p.payment_id
        ? target.renewal_payment_id
        : null;
    if (withdraw) await d.appliedPayments.setWithdraw(tx, p.payment_id, withdraw);
    return { result: 'applied', withdraw, period };
  });
  // Outside the transaction (it is another service); a failure throws, the event is redelivered, and the
  // duplicate path above finds the call again, so it happens at least once (each is idempotent).
  const wallet_id = envelope.wallet_id;
  if (outcome.withdraw) {
    // The subscription it belongs to: the one this payment activated, when that is another.
    const of = outcome.withdrawCheckoutOf ?? p.subscription_id;
    await callMessage(d.bus, messages.expireOpenPayments, { wallet_id, subscription_id: of, payment_id: outcome.withdraw });
  }
  if (outcome.withdrawCheckoutOf) {
    // Its checkout's invoices (the first, and any fresh one after it), those still open; not the renewal
    // invoice of the period it started, made already when this event is handled late or again (found in
    // review: a redelivery withdrew it). A payments replica older than the filter answers every payment:
    // those made after this moment are left, as before.
    const page = await callMessage(d.bus, messages.listSubscriptionPayments, {
      wallet_id,
      subscription_id: outcome.withdrawCheckoutOf,
      purpose: 'checkout',
      limit: 200,
      offset: 0,
    });
    const appliedBy = unixSeconds(d.clock);
    // Another checkout's invoices that ran out already are named too: their page follows the payment that
    // paid (found from outside: it said "expired" and offered a fresh invoice, refused with a 409). Not on
    // a replay (not recorded): those open then were named the first time.
    const named = (x: { status: string }) => x.status === 'pending' || (outcome.nameExpired === true && x.status === 'expired');
    for (const x of page.items.filter((x) => named(x) && x.created_at <= appliedBy)) {
      await callMessage(d.bus, messages.expireOpenPayments, {
        wallet_id,
        subscription_id: outcome.withdrawCheckoutOf,
        payment_id: x.id,
        replaced_by: p.payment_id,
      });
    }
  }
  if (outcome.unapplied) await callMessage(d.bus, messages.markUnapplied, { wallet_id, payment_id: p.payment_id, reason: outcome.unapplied });
  else {
    // Retried like the calls above (a timeout, payments' database away: the event is redelivered), but a
    // payments version without the message (or a bus config older than it) is not waited for: only the
    // checkout page's wait depends on the mark, and it ends by itself (found in review: a page waiting
    // for ever on one lost call).
    const period = outcome.period ? { period_start: outcome.period.start, period_end: outcome.period.end } : {};
    await callMessage(d.bus, messages.markApplied, { wallet_id, payment_id: p.payment_id, ...period }).catch((err) => {
      if (!(err instanceof BusUnavailableError && (err.noResponders || err.refused))) throw err;
      d.log.warn({ err, payment_id: p.payment_id }, 'no payments service takes the applied mark (an older version?): the checkout page waits its limit');
    });
  }
  return outcome.result;
}
