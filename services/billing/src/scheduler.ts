import { messages } from '@sb/contracts';
import { callMessage, conflict, DomainError, Poller, unixSeconds } from '@sb/runtime';
import type { Deps } from './deps.js';
import { chargeWithWallet, requestPayment } from './payments-client.js';
import { DAY_SECONDS, PENDING_EXPIRY_SECONDS, REMINDER_BEFORE_END_SECONDS, RENEWAL_LEAD_SECONDS } from './domain/periods.js';
import type { SubRow } from './store/subscriptions.repo.js';

/** Replacement invoices of one renewal reach the subscriber at most this often. */
const NOTIFY_REPLACEMENT_EVERY_S = 7 * DAY_SECONDS;
/** An NWC wallet that did not pay at period end is asked again after an hour, then daily, during the grace period. */
const NWC_FIRST_RETRY_S = 3600;
const NWC_RETRY_S = DAY_SECONDS;

/** An NWC subscription whose wallet still pays: charged at period end, not invoiced ahead. */
const autoPays = (s: SubRow) => s.payment_method === 'nwc' && !s.nwc_fallback;
/** Longer than a wallet may take to answer (the charge's bus wait, 40 s). */
const NWC_CHARGE_WINDOW_S = 120;
import { applyTransition, emit } from './transitions.js';

/**
 * Moves subscriptions along with time: renewal payments a lead time before the period ends (with a
 * reminder), the last reminder a day before, past_due / payment_failed at period end and grace end, and
 * expiry of unpaid checkouts. Every step is a compare-and-set and every external call is idempotent, so
 * several replicas may run at once and a crash between two steps loses or doubles nothing.
 */
export class Scheduler {
  private running?: Promise<number>;
  private readonly poller: Poller;

  constructor(
    private readonly d: Deps,
    intervalMs: number,
    private readonly batch = 500,
    private readonly concurrency = 8,
  ) {
    // A sweep already loops until nothing moves, so one per interval.
    this.poller = new Poller('scheduler', intervalMs, async () => (await this.tick(), false), d.log);
  }

  start(): void {
    this.poller.start();
  }

  async stop(): Promise<void> {
    await this.poller.stop();
    await this.running?.catch(() => undefined);
  }

  /** One sweep over everything due now (joins one in progress); returns how many subscriptions it looked at. */
  tick(): Promise<number> {
    this.running ??= this.sweep().finally(() => (this.running = undefined));
    return this.running;
  }

  /**
   * A sweep that starts after this call: a sweep already in progress read the time before the caller
   * moved the clock, so joining it would miss what the move made due.
   */
  async tickFromNow(): Promise<number> {
    await this.running?.catch(() => undefined);
    return this.tick();
  }

  private async sweep(): Promise<number> {
    let seen = 0;
    let passes = 0;
    for (;;) {
      const now = unixSeconds(this.d.clock);
      const due = await this.d.subscriptions.due(this.d.db, now, RENEWAL_LEAD_SECONDS, REMINDER_BEFORE_END_SECONDS, now - PENDING_EXPIRY_SECONDS, this.batch);
      let progressed = 0;
      for (let i = 0; i < due.length; i += this.concurrency) {
        const results = await Promise.all(due.slice(i, i + this.concurrency).map((s) => this.step(s, now).catch((err) => this.failed(s, err))));
        progressed += results.filter(Boolean).length;
      }
      seen += due.length;
      // A subscription moves one step per pass (renewal payment, then period end, ...): sweep again
      // while something moved, so a clock jump is caught up at once.
      if (progressed === 0 || ++passes >= 20) return seen;
    }
  }

  private failed(s: SubRow, err: unknown): false {
    if (err instanceof DomainError && err.status === 409) return false; // another replica moved it first
    this.d.log.warn({ err, subscription_id: s.id }, 'scheduler step failed; retried next tick');
    return false;
  }

  /** Does the one next thing due for this subscription; true when it changed something. */
  private async step(s: SubRow, now: number): Promise<boolean> {
    const d = this.d;
    const end = s.current_period_end;
    if (s.status === 'pending') {
      await d.db.tx(async (tx) => {
        const cur = await d.subscriptions.get(tx, null, s.id, true);
        if (!cur || cur.version !== s.version) throw conflict('moved');
        await applyTransition(d, tx, cur, { type: 'pending_timeout' }, now);
      });
      await callMessage(d.bus, messages.expireOpenPayments, { wallet_id: s.wallet_id, subscription_id: s.id }).catch(() => undefined);
      return true;
    }
    const graceEnd = end + s.grace_period_days * DAY_SECONDS;
    if (autoPays(s)) {
      // At period end (also when the clock is already past it), then on the retry schedule while grace lasts.
      const first = s.renewal_for !== end && now >= end;
      const retry = s.renewal_for === end && s.nwc_next_attempt_at !== null && now >= s.nwc_next_attempt_at && now < graceEnd;
      if (first || retry) {
        await this.chargeWallet(s, now, first);
        return true;
      }
      // No invoice goes out ahead of time, but the end of a trial is still announced, a day before.
      if (s.trial_end === end && s.reminded_for !== end && now < end && now >= end - REMINDER_BEFORE_END_SECONDS) {
        await this.inTx(s, async (tx, cur) => {
          const row = { ...cur, reminded_for: end, updated_at: now };
          if (!(await d.subscriptions.save(tx, row))) throw conflict('moved');
          await emit(d, tx, row, 'subscription.trial_ending', { trial_end: end, notify_subscriber: cur.receive_reminders });
        });
        return true;
      }
      // Paid by the wallet: billing's payment.received consumer renews it; the period must not lapse meanwhile.
      if (s.renewal_for === end && s.nwc_next_attempt_at === null) return false;
      // Another replica is waiting for the wallet (a crashed one only holds this for NWC_CHARGE_WINDOW_S).
      if (s.renewal_for === end && s.nwc_charging_since !== null && now - s.nwc_charging_since < NWC_CHARGE_WINDOW_S) return false;
    } else {
      // Also when the clock is already past the end: the subscriber still needs something to pay.
      const firstDue = s.renewal_for !== end && now >= end - RENEWAL_LEAD_SECONDS[s.interval];
      // An invoice has a bounded life; while the subscription can still be renewed, it gets a new one.
      const expired = s.renewal_for === end && s.renewal_expires_at !== null && now >= s.renewal_expires_at && now < graceEnd;
      if (firstDue || expired) {
        await this.issueRenewal(s, now, expired ? s.renewal_payment_id : null);
        return true;
      }
    }
    if (s.status === 'active' && now >= end) {
      await this.inTx(s, (tx, cur) => applyTransition(d, tx, cur, { type: 'period_end_unpaid' }, now));
      return true;
    }
    if (s.status === 'past_due' && now >= end + s.grace_period_days * DAY_SECONDS) {
      await this.inTx(s, (tx, cur) => applyTransition(d, tx, cur, { type: 'grace_end_unpaid' }, now));
      return true;
    }
    if (now < end && s.renewal_for === end && s.reminded_for !== end && now >= end - REMINDER_BEFORE_END_SECONDS) {
      await this.inTx(s, async (tx, cur) => {
        const row = { ...cur, reminded_for: end, reminder_notified_at: cur.receive_reminders ? now : cur.reminder_notified_at, updated_at: now };
        if (!(await d.subscriptions.save(tx, row))) throw conflict('moved');
        await emit(d, tx, row, 'renewal.reminder', { payment_id: cur.renewal_payment_id, due_at: end, notify_subscriber: cur.receive_reminders });
      });
      return true;
    }
    return false;
  }

  /**
   * Creates the renewal payment of the current period (or its replacement for the expired `previous`)
   * and sends it out in a reminder. The idempotency key names the period and what it replaces, so a
   * retry after a crash, or a second replica, gets the same payment back.
   */
  private async issueRenewal(s: SubRow, now: number, previous: string | null): Promise<void> {
    const d = this.d;
    const end = s.current_period_end;
    const { payment, checkout } = await this.requestRenewal(s, now, previous);
    await this.inTx(s, async (tx, cur) => {
      const lastCall = now >= end - REMINDER_BEFORE_END_SECONDS;
      // The subscriber hears of the first invoice and of the last call; of replacements (an invoice lives a
      // day, a grace period can last months) at most weekly. The owner's events carry every one.
      const notify = cur.receive_reminders && (!previous || (lastCall && cur.reminded_for !== end) || now - (cur.reminder_notified_at ?? 0) >= NOTIFY_REPLACEMENT_EVERY_S);
      const row = {
        ...cur, renewal_payment_id: payment.id, renewal_for: end, renewal_expires_at: checkout.expires_at,
        reminded_for: lastCall ? end : cur.reminded_for, reminder_notified_at: notify ? now : cur.reminder_notified_at, updated_at: now,
      };
      if (!(await d.subscriptions.save(tx, row))) throw conflict('moved');
      await d.subscriptions.recordRenewalPayment(tx, s.id, payment.id, end);
      await emit(d, tx, row, 'renewal.reminder', {
        // Whatever the method, the reminder carries what pays it: invoice, address (BIP21) or processor link.
        payment_id: payment.id, due_at: end, payment_method: payment.payment_method, payment_request: checkout.payment_request ?? null,
        onchain_address: checkout.onchain_address ?? null, bip21_uri: checkout.bip21_uri ?? null, checkout_url: checkout.checkout_url ?? null,
        amount_fiat: payment.amount_fiat ?? null, currency: payment.currency ?? null, expires_at: checkout.expires_at, notify_subscriber: notify,
        ...(previous ? { replaces_payment_id: previous } : {}),
      });
      if (!previous && cur.trial_end === end) await emit(d, tx, row, 'subscription.trial_ending', { trial_end: end, notify_subscriber: cur.receive_reminders });
    });
  }

  /**
   * One NWC attempt: the open renewal payment while its invoice stays payable, else a new one (the first
   * of the period, or a replacement of the expired one); the retry time is saved before the wallet is
   * asked, so a crash mid-charge leaves a retry, never a lapsed period. The NWC service confirms a paid
   * invoice in the payments service and billing's payment.received consumer applies it, once. A wallet
   * that is gone (deactivated after its last failure, or disconnected) moves the subscription to
   * invoices: the open payment goes out in a renewal reminder with its pay link.
   */
  private async chargeWallet(s: SubRow, now: number, first: boolean): Promise<void> {
    const d = this.d;
    const end = s.current_period_end;
    const open = !first && s.renewal_payment_id && (s.renewal_expires_at ?? 0) > now + 300 ? await this.openPayment(s, s.renewal_payment_id) : undefined;
    let payment = open;
    let expiresAt = s.renewal_expires_at;
    if (!payment) {
      const created = await this.requestRenewal(s, now, first ? null : s.renewal_payment_id);
      payment = { ...created.payment, payment_request: created.checkout.payment_request ?? created.payment.payment_request };
      expiresAt = created.checkout.expires_at;
    }
    const retryAt = now + (first ? NWC_FIRST_RETRY_S : NWC_RETRY_S);
    const row: SubRow = await this.inTx(s, async (tx, cur) => {
      const next = {
        ...cur, renewal_payment_id: payment.id, renewal_for: end, renewal_expires_at: expiresAt, nwc_next_attempt_at: retryAt, nwc_charging_since: now,
        updated_at: now,
      };
      if (!(await d.subscriptions.save(tx, next))) throw conflict('moved');
      await d.subscriptions.recordRenewalPayment(tx, s.id, payment.id, end);
      return { ...next, version: cur.version + 1 };
    });
    const result = payment.status === 'paid'
      ? ({ paid: true } as const)
      : await chargeWithWallet(d, s, { ...payment, payment_request: payment.payment_request! });
    if (!result.paid && !('no_connection' in result) && !result.deactivated) {
      d.log.info({ subscription_id: s.id, payment_id: payment.id, error_code: result.error_code, retry_at: retryAt }, 'nwc renewal not paid; retried later');
      // The period may lapse now (past_due / payment_failed); the retry stays scheduled.
      await this.inTx(row, async (tx, cur) => {
        if (!(await d.subscriptions.save(tx, { ...cur, nwc_charging_since: null }))) throw conflict('moved');
      });
      return;
    }
    const gone = !result.paid;
    await this.inTx(row, async (tx, cur) => {
      const next = {
        ...cur, nwc_next_attempt_at: null, nwc_charging_since: null, nwc_fallback: gone,
        reminder_notified_at: gone && cur.receive_reminders ? now : cur.reminder_notified_at, updated_at: now,
      };
      if (!(await d.subscriptions.save(tx, next))) throw conflict('moved');
      if (gone) {
        await emit(d, tx, next, 'renewal.reminder', {
          payment_id: payment.id, due_at: end, payment_method: payment.payment_method, payment_request: payment.payment_request ?? null,
          expires_at: expiresAt, notify_subscriber: cur.receive_reminders, reason: 'nwc_wallet_unavailable',
        });
      }
    });
  }

  /** A payment of the subscription, as the payments service has it now (its invoice included). */
  private async openPayment(s: SubRow, id: string) {
    const page = await callMessage(this.d.bus, messages.listSubscriptionPayments, { wallet_id: s.wallet_id, subscription_id: s.id, limit: 20, offset: 0 });
    const p = page.items.find((x) => x.id === id);
    return p && (p.status === 'pending' || p.status === 'paid') && p.payment_request ? p : undefined;
  }

  /**
   * The renewal payment of the current period, or the replacement of the expired `previous`: payable
   * until the grace period ends (the payments service may issue a shorter-lived invoice). The
   * idempotency key names the period and what it replaces, so a retry or a second replica gets it back.
   */
  private async requestRenewal(s: SubRow, now: number, previous: string | null) {
    const end = s.current_period_end;
    const plan = await this.d.plans.get(this.d.db, s.wallet_id, s.plan_id);
    return requestPayment(this.d, plan, s, {
      purpose: 'renewal', description: `${plan?.name ?? 'Subscription'} renewal`,
      expires_at: Math.max(end + s.grace_period_days * DAY_SECONDS, end + 3600, now + 3600),
      idempotency_key: previous ? `renewal:${s.id}:${end}:after:${previous}` : `renewal:${s.id}:${end}`,
    });
  }

  /** Re-reads the row under lock and runs `fn` only if nobody changed it since the sweep read it. */
  private inTx<T>(s: SubRow, fn: (tx: Parameters<Parameters<Deps['db']['tx']>[0]>[0], cur: SubRow) => Promise<T>): Promise<T> {
    return this.d.db.tx(async (tx) => {
      const cur = await this.d.subscriptions.get(tx, null, s.id, true);
      if (!cur || cur.version !== s.version) throw conflict('moved');
      return fn(tx, cur);
    });
  }
}

