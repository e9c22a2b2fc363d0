import { type CreatedPayment, messages, type NwcChargeResult, type PaymentMethod, RENEWAL_BATCH_MAX, type Plan } from '@sb/contracts';
import { callMessage, conflict, DomainError, Poller, unixSeconds } from '@sb/runtime';
import type { Deps } from './deps.js';
import { chargeWithWallet, requestPayment, requestPayments } from './payments-client.js';
import { PENDING_EXPIRY_SECONDS } from './domain/periods.js';
import {
  dueNow,
  dunningEnd,
  type Due,
  lostRenewal,
  renewalMade,
  renewalRefused,
  type SchedulePolicy,
  uncheckedRecheckAt,
  unpaidChargeMarker,
  walletGone,
} from './domain/schedule.js';
import type { SubRow } from './store/subscriptions.repo.js';
import { applyTransition, emit, emitMany, fiatCharged, reminderData, reminderTerms, renewalPeriodData, trialEndData } from './transitions.js';

type Renewal = { s: SubRow; due: Extract<Due, { kind: 'renewal_payment' }> };
type Tx = Parameters<Parameters<Deps['db']['tx']>[0]>[0];
type ToWithdraw = { wallet_id: string; subscription_id: string; payment_id: string; period_end: number };

/** Methods whose payments are charged in fiat (a processor's checkout): notices say that amount too. */
const FIAT_RAILS: ReadonlySet<PaymentMethod> = new Set(['cardproc', 'walletproc']);

/**
 * The payments service's answer that a payment can never be made as asked (the rail switched off, a price
 * under the card processor's minimum), unlike an outage, which is tried again at the next sweep.
 */
const isRefusal = (err: unknown): err is DomainError =>
  // Not a request that breaks the message's contract (two versions in a rolling update): that passes.
  err instanceof DomainError && err.kind === 'invalid' && !err.issues?.some((i) => i.in === 'message');

/** Renewal payments left to withdraw that one sweep takes up (more wait for the next). */
const WITHDRAW_PER_SWEEP = 100;

/** Renewal payments per payments message and billing transaction. */
const RENEWAL_BATCH = RENEWAL_BATCH_MAX;
/**
 * Batches of a sweep pass in flight at once (see `sweep`): enough that billing, payments, the notifier
 * and PostgreSQL each have work while the others do theirs (two left a third of 2 cores idle).
 */
export const RENEWAL_LANES = 4;
/** Due subscriptions a sweep pass loads: its batches wait for each other at the end of a pass. */
export const SWEEP_PASS_ROWS = 2000;

/**
 * What a renewal payment is asked for: payable through grace and the dunning window (the payments
 * service may issue a shorter-lived invoice). The idempotency key names the period and what it replaces
 * (`previous`), so a retry or a second replica gets it back.
 */
export function renewalAsk(s: SubRow, now: number, previous: string | null, plan: Plan | undefined, policy: SchedulePolicy) {
  const end = s.current_period_end;
  return {
    purpose: 'renewal' as const,
    description: `${plan?.name ?? 'Subscription'} renewal`,
    // Payments caps each invoice's life; it is reissued.
    expires_at: Math.max(dunningEnd(s, policy), end + 3600, now + 3600),
    idempotency_key: previous ? `renewal:${s.id}:${end}:after:${previous}` : `renewal:${s.id}:${end}`,
    // Paid after all (its event late), payments makes no replacement: this sweep skips it as a conflict.
    ...(previous ? { replaces: previous } : {}),
  };
}

/** The row of a subscription whose renewal payment a sweep has just had made (saved by compare-and-set). */
export function renewalRow({ s, due }: Renewal, created: CreatedPayment, now: number): SubRow {
  const end = s.current_period_end;
  return {
    ...s,
    renewal_payment_id: created.payment.id,
    renewal_for: end,
    renewal_expires_at: created.checkout.expires_at,
    ...renewalMade,
    reminded_for: due.last_call ? end : s.reminded_for,
    reminder_notified_at: due.notify_subscriber ? now : s.reminder_notified_at,
    updated_at: now,
  };
}

/**
 * The events of a renewal payment made by a sweep: the reminder that sends it out and, at the end of a
 * free trial, `subscription.trial_ending` for owners. `s` is the row as the sweep read it, `row` as saved.
 */
export function renewalEvents({ s, due, row, created }: Renewal & { row: SubRow; created: CreatedPayment }, now: number, policy: SchedulePolicy) {
  return [
    {
      s: row,
      event: 'renewal.reminder' as const,
      extra: {
        ...reminderData(created, s.current_period_end, due.notify_subscriber),
        ...reminderTerms(s, now, policy),
        ...trialEndData(s, now),
        ...(due.replaces ? { replaces_payment_id: due.replaces } : {}),
      },
    },
    ...(due.trial_ending
      ? [
          {
            s: row,
            event: 'subscription.trial_ending' as const,
            extra: {
              trial_end: s.current_period_end,
              // The reminder beside it says the trial ends, with the invoice: one message, not two alike.
              notify_subscriber: false,
              ...fiatCharged(created.payment),
              ...renewalPeriodData(s, now, policy),
            },
          },
        ]
      : []),
  ];
}

/**
 * Carries out what domain/schedule.ts says is due: it loads the rows whose stored next due time has
 * come and dispatches `dueNow` for each. Every step is a compare-and-set and every external call is
 * idempotent, so several replicas may run at once and a crash between two steps loses or doubles nothing.
 */
export class Scheduler {
  private running?: Promise<number>;
  private readonly poller: Poller;
  private plans = new Map<string, ReturnType<Deps['plans']['get']>>();
  /** The last sweep stopped at its pass limit with rows still due: the poller runs again at once. */
  private backlog = false;
  /** The sweep under way met an outage: it is no sign that one ended. */
  private outageInSweep = false;

  constructor(
    private readonly d: Deps,
    intervalMs: number,
    private readonly policy: SchedulePolicy,
    private readonly batch = SWEEP_PASS_ROWS,
    private readonly concurrency = 8,
  ) {
    // A sweep already loops until nothing moves, so one per interval.
    this.poller = new Poller('scheduler', intervalMs, async () => (await this.tick(), this.backlog), d.log);
  }

  /**
   * Whether `err` is an outage. Each step catches its own failure (one subscription's must not hold back
   * the rest), so the poller's logs are told: an outage is said once, not per subscription or batch.
   */
  private outage(err: unknown): boolean {
    const hit = this.poller.failed(err);
    if (hit) this.outageInSweep = true;
    return hit;
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
    this.outageInSweep = false;
    const seen = await this.passes();
    // Left flagged by a sweep that stopped (a crash, the payments service away) before withdrawing them:
    // after the sweep's own work, which a slow payments service must not hold back by up to
    // WITHDRAW_PER_SWEEP calls.
    const left = await this.d.subscriptions.toWithdraw(this.d.db, WITHDRAW_PER_SWEEP).catch((err) => {
      if (!this.outage(err)) this.d.log.warn({ err }, 'renewal payments left to withdraw could not be read; retried next sweep');
      return [];
    });
    await this.withdraw(left);
    // A sweep with nothing due reached no other service: it cannot tell that an outage ended. One that
    // did, without meeting one, can, whether the poller ran it or a move of the test clock did.
    if (seen === 0 && left.length === 0) this.poller.busUnreached();
    else if (!this.outageInSweep) this.poller.ok();
    return seen;
  }

  /** The passes of a sweep, until nothing moves (or the pass limit); returns how many subscriptions it looked at. */
  private async passes(): Promise<number> {
    let seen = 0;
    let passes = 0;
    this.backlog = false;
    for (;;) {
      const now = unixSeconds(this.d.clock);
      this.plans = new Map();
      const due = await this.d.subscriptions.due(this.d.db, now, this.batch);
      // Renewal payments go out in batches (one payments message and one transaction each, the bulk of
      // a backlog); the other steps one by one.
      const renewals: Renewal[] = [];
      const others: SubRow[] = [];
      for (const s of due) {
        const next = dueNow(s, now, this.policy);
        if (next.kind === 'renewal_payment') renewals.push({ s, due: next });
        else others.push(s);
      }
      // RENEWAL_LANES batches in flight, each taking the next when done: while billing saves one, the
      // payments service is already making the next one's invoices.
      let next = 0;
      const lane = async () => {
        let n = 0;
        while (next < renewals.length) {
          const batch = renewals.slice(next, (next += RENEWAL_BATCH));
          n += await this.issueRenewals(batch, now).catch((err) => this.batchFailed(batch, now, err));
        }
        return n;
      };
      const batches = Array.from({ length: RENEWAL_LANES }, lane);
      let progressed = 0;
      for (let i = 0; i < others.length; i += this.concurrency) {
        const results = await Promise.all(others.slice(i, i + this.concurrency).map((s) => this.step(s, now).catch((err) => this.failed(s, err))));
        progressed += results.filter(Boolean).length;
      }
      for (const n of await Promise.all(batches)) progressed += n;
      seen += due.length;
      // A subscription moves one step per pass (renewal payment, then period end, ...): sweep again
      // while something moved, so a clock jump is caught up at once. A backlog larger than the pass
      // limit goes on in the next sweep, at once.
      if (progressed === 0) return seen;
      if (++passes >= 20) {
        this.backlog = due.length === this.batch;
        return seen;
      }
    }
  }

  /**
   * A batch failed as a whole. With the database or the payments service away, it waits for the next
   * tick; otherwise the cause may be one row's, so each is tried alone and no bad row holds back the rest.
   */
  private async batchFailed(batch: Renewal[], now: number, err: unknown): Promise<number> {
    if (batch.length === 1) return Number(this.failed(batch[0]!.s, err));
    if (this.outage(err)) return 0;
    this.d.log.warn({ err, subscriptions: batch.length, first_subscription_id: batch[0]?.s.id }, 'renewal batch failed; its rows are tried one by one');
    let n = 0;
    for (const r of batch) n += await this.issueRenewals([r], now).catch((e) => Number(this.failed(r.s, e)));
    return n;
  }

  private failed(s: SubRow, err: unknown): false {
    if (err instanceof DomainError && err.kind === 'conflict') return false; // another replica moved it first
    if (this.outage(err)) return false;
    this.d.log.warn({ err, subscription_id: s.id }, 'scheduler step failed; retried next tick');
    return false;
  }

  /**
   * Runs what is due for one subscription now (right after a resume, say), outside the sweep; a failure
   * is logged and left to the next sweep.
   */
  async runFor(id: string): Promise<void> {
    const s = await this.d.subscriptions.get(this.d.db, null, id);
    if (s) await this.step(s, unixSeconds(this.d.clock)).catch((err) => this.failed(s, err));
  }

  /** Does the one thing due for this subscription (domain/schedule.ts); true when it changed something. */
  private async step(s: SubRow, now: number): Promise<boolean> {
    const d = this.d;
    const due: Due = dueNow(s, now, this.policy);
    const end = s.current_period_end;
    switch (due.kind) {
      case 'none':
        await d.subscriptions.setNextDue(d.db, s, now);
        return false;
      case 'lapse': {
        // A step of dunning (payable until pay_by): its notice says what the renewal charges and covers.
        const dunning = due.pay_by !== undefined;
        const fiat = dunning ? await this.renewalFiat(s) : {};
        const extra = {
          ...(due.notify_subscriber ? { notify_subscriber: true } : {}),
          ...(due.reason ? { reason: due.reason } : {}),
          ...(due.pay_by !== undefined ? { pay_by: due.pay_by } : {}),
          ...(due.wallet_retries ? { wallet_retries: true } : {}),
          ...(due.wallet_failed ? { wallet_failed: true } : {}),
          ...(due.after_trial ? { after_trial: true } : {}),
          // The owner hears why no invoice went out; the subscriber that one is tried again.
          ...(due.renewal_refused ? { renewal_refused: s.renewal_refused_reason ?? 'refused by the payments service' } : {}),
          ...(due.invoice_to_follow ? { invoice_to_follow: true } : {}),
        };
        const saved = await this.inTx(s, (tx, cur) =>
          applyTransition(d, tx, cur, { type: due.event }, now, {}, (next) => ({
            ...extra,
            ...fiat,
            ...(dunning ? renewalPeriodData(next, now, this.policy) : {}),
          })),
        );
        if (saved.status === 'expired') {
          // Best effort (the payments sweeper expires them by time); an outage is still one the sweep met.
          await callMessage(d.bus, messages.expireOpenPayments, { wallet_id: s.wallet_id, subscription_id: s.id }).catch((err) => this.outage(err));
        }
        return true;
      }
      case 'renewal_payment':
        return (await this.issueRenewals([{ s, due }], now)) > 0;
      case 'charge_wallet':
        await this.chargeWallet(s, now, due.first, due.retry_at);
        return true;
      case 'resume_payment':
        await this.issueResumePayment(s, now);
        return true;
      case 'trial_ending':
        await this.inTx(s, async (tx, cur) => {
          const row = { ...cur, reminded_for: end, updated_at: now };
          if (!(await d.subscriptions.save(tx, row))) throw conflict('moved');
          // The connected wallet pays the first renewal: no invoice was sent to pay.
          await emit(d, tx, row, 'subscription.trial_ending', {
            trial_end: end,
            wallet_pays: true,
            notify_subscriber: cur.receive_reminders,
            ...renewalPeriodData(cur, now, this.policy),
          });
        });
        return true;
      case 'last_call': {
        const fiat = await this.renewalFiat(s);
        await this.inTx(s, async (tx, cur) => {
          const row = { ...cur, reminded_for: end, reminder_notified_at: due.notify_subscriber ? now : cur.reminder_notified_at, updated_at: now };
          if (!(await d.subscriptions.save(tx, row))) throw conflict('moved');
          await emit(d, tx, row, 'renewal.reminder', {
            payment_id: cur.renewal_payment_id,
            due_at: end,
            notify_subscriber: due.notify_subscriber,
            ...fiat,
            ...reminderTerms(cur, now, this.policy),
            ...trialEndData(cur, now),
          });
        });
        return true;
      }
    }
  }

  /**
   * Creates the renewal payment of the current period (or its replacement for the expired `previous`)
   * of each subscription and sends it out in a reminder: one payments message for the batch, then one
   * transaction saving every row still at the version the sweep read (a row another writer moved is
   * skipped, as a conflict), its renewal record and its events. The idempotency key names the period and
   * what it replaces, so a retry after a crash, or a second replica, gets the same payment back. Returns
   * how many were renewed.
   */
  private async issueRenewals(batch: Renewal[], now: number): Promise<number> {
    const d = this.d;
    const plans = await Promise.all(batch.map(({ s }) => this.planOf(s)));
    const answers = await requestPayments(
      d,
      batch.map(({ s, due }, i) => ({ plan: plans[i], sub: s, o: renewalAsk(s, now, due.replaces, plans[i], this.policy) })),
    );
    const refusals: { s: SubRow; err: DomainError }[] = [];
    const issued = batch.flatMap((r, i) => {
      const a = answers[i]!;
      if (a instanceof DomainError) {
        if (isRefusal(a)) refusals.push({ s: r.s, err: a });
        else this.failed(r.s, a);
        return [];
      }
      return [{ ...r, row: renewalRow(r, a, now), created: a }];
    });
    const refusedSaved = await this.refused(refusals, now);
    if (!issued.length) return refusedSaved;
    const { n, lost } = await d.db.tx(async (tx) => {
      const saved = await d.subscriptions.saveMany(
        tx,
        issued.map((x) => x.row),
      );
      const done = issued.filter((x) => saved.has(x.s.id));
      const lost = await this.settleLost(
        tx,
        issued.filter((x) => !saved.has(x.s.id)),
        now,
      );
      await d.subscriptions.recordRenewalPayments(
        tx,
        done.map(({ s, created }) => ({ subscription_id: s.id, payment_id: created.payment.id, period_end: s.current_period_end })),
      );
      await emitMany(
        d,
        tx,
        done.flatMap((x) => renewalEvents(x, now, this.policy)),
      );
      return { n: done.length, lost };
    });
    await this.withdraw(lost);
    return n + refusedSaved;
  }

  /**
   * The payments service refused to make these subscriptions' renewal payments (a DomainError of kind
   * `invalid`: the rail switched off, a price under the card processor's minimum): not an outage, so each
   * is recorded, the period lapses on time, and the ask is made again later (domain/schedule.ts
   * `refusalHolds`). One transaction for them all (a rail switched off refuses a whole batch); a row
   * another writer moved since the sweep read it is skipped, and the next pass looks again. Returns how
   * many were recorded.
   */
  private async refused(refusals: { s: SubRow; err: DomainError }[], now: number): Promise<number> {
    if (!refusals.length) return 0;
    // Once per batch: a rail switched off refuses every renewal on it.
    const [first] = refusals;
    this.d.log.warn(
      { subscriptions: refusals.length, subscription_id: first!.s.id, reason: first!.err.message },
      'the payments service refused renewal payments; asked again later',
    );
    const rows = refusals.map(({ s, err }) => ({ ...s, ...renewalRefused(s, now, err.message), updated_at: now }));
    try {
      return (await this.d.db.tx((tx) => this.d.subscriptions.saveMany(tx, rows))).size;
    } catch (err) {
      this.failed(first!.s, err);
      return 0;
    }
  }

  /** For a payment request's `catch`: a refusal is recorded (`refused`) and answers no payment; anything else is thrown on. */
  private onRefusal(s: SubRow, now: number) {
    return async (err: unknown): Promise<undefined> => {
      if (!isRefusal(err)) throw err;
      await this.refused([{ s, err }], now);
      return undefined;
    };
  }

  /**
   * The rows of a batch another writer moved first (saveMany skipped them; they are locked by it in
   * `tx`): each payment made for one is linked by a later pass, or flagged to be withdrawn in the same
   * transaction (domain/schedule.ts `lostRenewal`). Returns those to withdraw.
   */
  private async settleLost(tx: Tx, lost: { s: SubRow; due: Renewal['due']; created: CreatedPayment }[], now: number) {
    const d = this.d;
    const out: ToWithdraw[] = [];
    for (const { s, due, created } of lost) {
      const cur = await d.subscriptions.get(tx, null, s.id, true);
      const end = s.current_period_end;
      const what = lostRenewal(cur, { end, replaces: due.replaces, payment_id: created.payment.id }, now);
      if (what.kind === 'keep') continue;
      if (cur && what.link && !(await d.subscriptions.save(tx, { ...cur, ...what.link, updated_at: now }))) throw conflict('moved');
      out.push({ wallet_id: s.wallet_id, subscription_id: s.id, payment_id: created.payment.id, period_end: end });
    }
    await d.subscriptions.recordToWithdraw(tx, out);
    return out;
  }

  /**
   * Expires renewal payments flagged to be withdrawn, then clears their flags. When the payments service
   * does not answer it stops: that one and the rest stay flagged for the next sweep (`sweep` ends with
   * those left over), rather than each waiting out the bus timeout in turn. One it answers with a refusal
   * is skipped, so that it cannot hold the others back sweep after sweep.
   */
  private async withdraw(items: Omit<ToWithdraw, 'period_end'>[]): Promise<void> {
    const done: string[] = [];
    for (const { wallet_id, subscription_id, payment_id } of items) {
      try {
        await callMessage(this.d.bus, messages.expireOpenPayments, { wallet_id, subscription_id, payment_id });
        done.push(payment_id);
      } catch (err) {
        // The bus or the payments service away: said once for the sweep's steps (not per sweep, with a
        // stack); the rest waits too.
        if (this.outage(err)) break;
        this.d.log.warn({ err, subscription_id, payment_id }, 'renewal payment nobody was sent refused withdrawal; retried next sweep');
      }
    }
    // Flags not cleared only mean a second, harmless expiry by the next sweep.
    await this.d.subscriptions.withdrawn(this.d.db, done).catch((err) => this.d.log.warn({ err }, 'withdrawn renewal payments stay flagged'));
  }

  /**
   * The renewal payment of a subscription resumed after its period ended, sent in a reminder unless its
   * NWC wallet pays it at once: by the resume itself, or by a sweep when the resume could not make it or
   * stopped while the wallet was asked. The idempotency key names the resume (its pending_since), so all
   * of them get the same payment; it is linked once, and its reminder sent once (in the transaction that
   * links it, or for a wallet's charge the one that ends it). A wallet that fails leaves the payment open
   * for the subscriber to pay.
   */
  async issueResumePayment(s: SubRow, now: number): Promise<void> {
    const d = this.d;
    const plan = await d.plans.get(d.db, s.wallet_id, s.plan_id);
    const created = await requestPayment(d, plan, s, {
      purpose: 'renewal',
      description: `${plan?.name ?? 'Subscription'} renewal`,
      expires_at: (s.pending_since ?? now) + PENDING_EXPIRY_SECONDS,
      idempotency_key: `resume:${s.id}:${s.pending_since}`,
    }).catch(this.onRefusal(s, now));
    if (!created) return;
    const { payment, checkout } = created;
    const row = { ...s, renewal_payment_id: payment.id };
    const reminder = { ...reminderData(created, now, s.receive_reminders), ...reminderTerms(s, now, this.policy), reason: 'resumed' };
    const remind = async () => {
      await d.db.tx(async (tx) => {
        if (await d.subscriptions.settleResumeCharge(tx, s.id)) await emit(d, tx, row, 'renewal.reminder', reminder);
      });
    };
    // Linked already, its wallet asked by a resume that stopped before the answer: the reminder, unless paid.
    if (s.renewal_payment_id === payment.id) {
      if (payment.status === 'paid') await d.subscriptions.settleResumeCharge(d.db, s.id);
      else await remind();
      return;
    }
    if (!(s.payment_method === 'nwc' && !s.nwc_fallback && checkout.payment_request)) {
      const linked = await d.db.tx(async (tx) => {
        if (!(await d.subscriptions.linkResumePayment(tx, s.id, payment.id, null))) return false;
        await emit(d, tx, row, 'renewal.reminder', reminder);
        return true;
      });
      if (!linked) await this.withdrawUnlinked(s, payment.id);
      return;
    }
    if (!(await d.subscriptions.linkResumePayment(d.db, s.id, payment.id, now))) return this.withdrawUnlinked(s, payment.id);
    const charged = await chargeWithWallet(d, s, { ...payment, payment_request: checkout.payment_request }).catch((err) => ({ paid: false as const, err }));
    // A preimage not checked yet, or a wallet that may still pay (no answer in time) and is still
    // connected, leaves the charge recorded: after the charge window, a sweep sends the reminder unless the
    // payment is paid by then. A deactivated one falls back to invoices below (found in review).
    if (charged.paid ? charged.confirmed === false : 'may_still_pay' in charged && charged.may_still_pay && !charged.deactivated) return;
    if (charged.paid) {
      await d.subscriptions.settleResumeCharge(d.db, s.id);
      return;
    }
    d.log.info({ subscription_id: s.id, payment_id: payment.id, result: charged }, 'resume: the NWC wallet did not pay; the invoice stays open');
    // A wallet that is gone (or was just deactivated) leaves the subscription to invoices.
    if ('no_connection' in charged || ('deactivated' in charged && charged.deactivated)) await d.subscriptions.setNwcFallback(d.db, s.wallet_id, s.id, now);
    await remind();
  }

  /**
   * A resume's payment made after the subscription moved on (cancelled, or activated by the invoice the
   * pause withdrew, paid late): nobody was sent it, so it must not stay payable.
   */
  private async withdrawUnlinked(s: SubRow, paymentId: string): Promise<void> {
    const cur = await this.d.subscriptions.get(this.d.db, s.wallet_id, s.id);
    if (cur?.renewal_payment_id === paymentId) return;
    await callMessage(this.d.bus, messages.expireOpenPayments, { wallet_id: s.wallet_id, subscription_id: s.id, payment_id: paymentId }).catch((err) =>
      // It expires by itself at the end of the resume's 24 hours.
      this.d.log.warn({ err, subscription_id: s.id, payment_id: paymentId }, 'resume payment left unlinked could not be withdrawn'),
    );
  }

  /**
   * One NWC attempt: the open renewal payment while its invoice stays payable, else a new one (the first
   * of the period, or a replacement of the expired one); the retry time is saved before the wallet is
   * asked, so a crash mid-charge leaves a retry, never a lapsed period. The NWC service confirms a paid
   * invoice in the payments service and billing's payment.received consumer applies it, once. A wallet
   * that is gone (deactivated after its last failure, or disconnected) moves the subscription to
   * invoices: the open payment goes out in a renewal reminder with its pay link.
   */
  private async chargeWallet(s: SubRow, now: number, first: boolean, retryAt: number): Promise<void> {
    const d = this.d;
    const end = s.current_period_end;
    const open = !first && s.renewal_payment_id && (s.renewal_expires_at ?? 0) > now + 300 ? await this.openPayment(s, s.renewal_payment_id) : undefined;
    let payment = open;
    let expiresAt = s.renewal_expires_at;
    if (!payment) {
      const created = await this.requestRenewal(s, now, first ? null : s.renewal_payment_id).catch(this.onRefusal(s, now));
      if (!created) return;
      payment = { ...created.payment, payment_request: created.checkout.payment_request ?? created.payment.payment_request };
      expiresAt = created.checkout.expires_at;
    }
    const row: SubRow = await this.inTx(s, async (tx, cur) => {
      const next = {
        ...cur,
        renewal_payment_id: payment.id,
        renewal_for: end,
        renewal_expires_at: expiresAt,
        ...renewalMade,
        nwc_next_attempt_at: retryAt,
        nwc_charging_since: now,
        updated_at: now,
      };
      if (!(await d.subscriptions.save(tx, next))) throw conflict('moved');
      await d.subscriptions.recordRenewalPayment(tx, s.id, payment.id, end);
      return { ...next, version: cur.version + 1 };
    });
    const result: NwcChargeResult =
      payment.status === 'paid' ? { paid: true } : await chargeWithWallet(d, s, { ...payment, payment_request: payment.payment_request! });
    // Paid by a preimage the payments service could not check yet: not paid until it is (a refused one paid
    // nothing). The charge stays under way, so the period does not lapse on it, and is made again soon.
    if (result.paid && result.confirmed === false) {
      const recheckAt = uncheckedRecheckAt(now);
      d.log.info({ subscription_id: s.id, payment_id: payment.id, recheck_at: recheckAt }, 'nwc renewal paid by a preimage not checked yet');
      await this.inTx(row, async (tx, cur) => {
        if (!(await d.subscriptions.save(tx, { ...cur, nwc_next_attempt_at: recheckAt }))) throw conflict('moved');
      });
      return;
    }
    if (!result.paid && !('no_connection' in result) && !result.deactivated) {
      const mayStillPay = result.may_still_pay === true;
      d.log.info(
        { subscription_id: s.id, payment_id: payment.id, error_code: result.error_code, may_still_pay: mayStillPay, retry_at: retryAt },
        'nwc renewal not paid; retried later',
      );
      // The period may lapse (past_due / payment_failed), at once or after the late answer's window; the retry stays scheduled.
      await this.inTx(row, async (tx, cur) => {
        if (!(await d.subscriptions.save(tx, { ...cur, ...unpaidChargeMarker(mayStillPay, unixSeconds(d.clock)) }))) throw conflict('moved');
      });
      return;
    }
    const gone = !result.paid;
    await this.inTx(row, async (tx, cur) => {
      const next = {
        ...cur,
        ...(gone ? walletGone(cur, now) : { nwc_next_attempt_at: null, nwc_charging_since: null, nwc_fallback: false }),
        updated_at: now,
      };
      if (!(await d.subscriptions.save(tx, next))) throw conflict('moved');
      if (gone) {
        await emit(d, tx, next, 'renewal.reminder', {
          payment_id: payment.id,
          due_at: end,
          payment_method: payment.payment_method,
          payment_request: payment.payment_request ?? null,
          expires_at: expiresAt,
          notify_subscriber: cur.receive_reminders,
          reason: 'nwc_wallet_unavailable',
          ...reminderTerms(cur, now, this.policy),
          ...trialEndData(cur, now),
        });
      }
    });
  }

  /**
   * What the open renewal payment charges in fiat (card, PayPal), for a notice sent without it in hand:
   * said as the reminder said it. Without the payments service's answer the notice gives the sats alone
   * rather than wait (a lapse is not held back by it).
   */
  private async renewalFiat(s: SubRow): Promise<Record<string, unknown>> {
    if (!FIAT_RAILS.has(s.payment_method) || !s.renewal_payment_id || s.renewal_for !== s.current_period_end) return {};
    try {
      const { payment } = await callMessage(this.d.bus, messages.getPayment, { wallet_id: s.wallet_id, id: s.renewal_payment_id });
      return payment?.subscription_id === s.id ? fiatCharged(payment) : {};
    } catch (err) {
      if (!this.outage(err)) this.d.log.warn({ err, subscription_id: s.id }, 'renewal payment not read; the notice gives its amount in sats only');
      return {};
    }
  }

  /** A payment of the subscription, as the payments service has it now (its invoice included). */
  private async openPayment(s: SubRow, id: string) {
    const { payment: p } = await callMessage(this.d.bus, messages.getPayment, { wallet_id: s.wallet_id, id });
    return p && p.subscription_id === s.id && (p.status === 'pending' || p.status === 'paid') && p.payment_request ? p : undefined;
  }

  /** The renewal payment of the current period, or the replacement of the expired `previous` (see `renewalAsk`). */
  private async requestRenewal(s: SubRow, now: number, previous: string | null) {
    const plan = await this.planOf(s);
    return requestPayment(this.d, plan, s, renewalAsk(s, now, previous, plan, this.policy));
  }

  /**
   * The plan of a due subscription, read once per sweep pass: a backlog is mostly a few plans, and the
   * plan gives only the invoice's description (the price is the subscription's own).
   */
  private planOf(s: SubRow) {
    const key = `${s.wallet_id}/${s.plan_id}`;
    let plan = this.plans.get(key);
    if (!plan) {
      plan = this.d.plans.get(this.d.db, s.wallet_id, s.plan_id);
      this.plans.set(key, plan);
      plan.catch(() => this.plans.delete(key));
    }
    return plan;
  }

  /** Re-reads the row under lock and runs `fn` only if nobody changed it since the sweep read it. */
  private inTx<T>(s: SubRow, fn: (tx: Tx, cur: SubRow) => Promise<T>): Promise<T> {
    return this.d.db.tx(async (tx) => {
      const cur = await this.d.subscriptions.get(tx, null, s.id, true);
      if (!cur || cur.version !== s.version) throw conflict('moved');
      return fn(tx, cur);
    });
  }
}
