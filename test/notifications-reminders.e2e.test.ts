import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { devClock } from './support/clock.js';
import { client, until } from './support/http.js';
import { startNostrRelay, type NostrRelay } from './support/nostr-relay.js';
import { startNwcWallet, type NwcWallet } from './support/nwc-wallet.js';
import { startSmtpServer } from './support/smtp-server.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * Renewal reminders as the subscriber gets them, through HTTP and the whole stack (the scheduler at the
 * dev clock, the notifier mailing a local SMTP server): the promises the schedule's and the notifier's
 * unit tests make, kept end to end. After an extend: a wallet that still pays is charged at the new end,
 * with no last call; days granted after access ended are read as a period from the payment, to be paid
 * by the end of the dunning window the extend kept. And the end of a trial paid by invoice reaches the
 * subscriber when the owner chose the trial-end notice alone. This file owns its stack: it moves the
 * shared test clock.
 */
const DAY = 86_400;
let stack: Stack;
let relay: NostrRelay;
let smtp: Awaited<ReturnType<typeof startSmtpServer>>;
let admin: ReturnType<typeof client>;
const wallets: NwcWallet[] = [];
const anon = () => client(stack.api);

beforeAll(async () => {
  [relay, smtp] = await Promise.all([startNostrRelay(), startSmtpServer('mailer', 'mail-pass')]);
  stack = await startStack({
    wallets: 1,
    env: {
      SMTP_URL: smtp.url,
      MAIL_FROM: 'Billing <billing@example.com>',
      NOTIFIER_POLL_INTERVAL_MS: '150',
      // Sweeps run as the clock moves, each waiting for the wallets it asks.
      SCHEDULER_INTERVAL_MS: '60000',
      BUS_TIMEOUT_MS: '60000',
      NWC_INFO_TIMEOUT_MS: '3000',
      NWC_REPLY_TIMEOUT_MS: '4000',
      NWC_SWEEP_INTERVAL_MS: '500',
    },
  });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
});
afterAll(async () => {
  await Promise.all(wallets.map((w) => w.stop()));
  await stack?.stop();
  await Promise.allSettled([relay?.stop(), smtp?.stop()]);
});

const { advanceTo } = devClock(() => admin);
const sub = async (id: string) => (await admin.get(`/subscriptions/${id}`)).body;
const mailsTo = (to: string) => smtp.mails.filter((m) => m.to.includes(to));
const settle = (ms = 1500) => new Promise((r) => setTimeout(r, ms));
/** As the notifier writes a time. */
const utc = (t: number) => `${new Date(t * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
/** The subscription's events in the order billing emitted them. */
async function events(id: string) {
  const { rows } = await stack.db.query(
    `SELECT payload->>'event' AS e, payload->'data' AS d FROM billing.outbox WHERE payload->'data'->>'subscription_id' = $1 ORDER BY seq`,
    [id],
  );
  return rows as { e: string; d: Record<string, unknown> }[];
}
async function plan(body: Record<string, unknown>) {
  const res = await admin.post('/plans', { amount_sats: 1000, interval: 'weekly', ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body as { id: string };
}

describe('reminders end to end', () => {
  it('the end of a trial paid by invoice reaches the subscriber when the owner chose only the trial-end notice', async () => {
    const p = await plan({ name: 'Trial notice', trial_days: 2 });
    // The plan's own settings: the server's mail server, and of the subscriber notices only the trial's end.
    const set = await admin.put(`/plans/${p.id}/notification-settings`, {
      inherit: false,
      channels: { email: { smtp_url: null } },
      subscriber_events: ['subscription.trial_ending'],
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body.subscriber_events).toEqual(['subscription.trial_ending']);
    const started = await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'trial-only@example.com' });
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const trialEnd = (await sub(started.body.subscription_id)).trial_end as number;
    // The weekly lead time: the renewal invoice goes out a day before the trial ends, as the trial's end notice.
    await advanceTo(trialEnd - DAY + 120);
    const said = `Your free trial of Trial notice ends on ${utc(trialEnd)}. To keep access, pay 1,000 sats.`;
    const got = await until(
      async () => mailsTo('trial-only@example.com'),
      (m) => m.some((x) => x.text.includes(said)),
    );
    const notice = got.find((x) => x.text.includes(said))!;
    expect(notice.subject).toBe('Your free trial of Trial notice is ending: payment due');
    expect(notice.text).toMatch(/\nlightning:ln\w+\n/);
    // Billing sent it as the renewal reminder (the trial_ending event beside it is the owner's).
    const sent = (await events(started.body.subscription_id)).filter((x) => x.e === 'renewal.reminder');
    expect(sent).toHaveLength(1);
    expect(sent[0]!.d).toMatchObject({ notify_subscriber: true, trial_end: trialEnd });
    await settle();
    expect(mailsTo('trial-only@example.com').filter((x) => x.text.includes('free trial of Trial notice ends'))).toHaveLength(1);
  });

  it('an NWC subscription whose wallet still pays, extended while past_due: no last call before the new end, its wallet charged at it', async () => {
    const w = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    wallets.push(w);
    const p = await plan({ name: 'Wallet extended', grace_period_days: 5, allow_nwc: true });
    const email = 'wallet-extended@example.com';
    const res = (await anon().post('/public/subscribe/nwc', { plan_id: p.id, email, nwc_connection_string: w.connectionString() })).body;
    expect(res.status).toBe('active');
    const id = res.subscription_id as string;
    const end = (
      await until(
        () => sub(id),
        (x) => x.status === 'active',
      )
    ).current_period_end as number;
    // The wallet cannot pay at the end: past_due, the wallet still asked again (not given up).
    w.setBehaviour({ error: 'INSUFFICIENT_BALANCE', message: 'Empty' });
    await advanceTo(end + 60);
    expect(await sub(id)).toMatchObject({ status: 'past_due', has_access: true });
    expect(w.requests).toHaveLength(2);
    expect((await events(id)).find((x) => x.e === 'subscription.past_due')?.d).toMatchObject({ wallet_retries: true });

    const extended = await admin.post(`/subscriptions/${id}/extend?days=30`);
    expect(extended.body).toMatchObject({ status: 'past_due', current_period_end: end + 30 * DAY, has_access: true });
    w.setBehaviour({ pay: true });
    await settle();
    const before = (await events(id)).length;
    const mailed = mailsTo(email).length;

    // Through the retry that was due, the new lead time and the last call's day: nothing is asked or sent.
    for (const t of [end + 3600 + 120, end + 10 * DAY, end + 29 * DAY + 3600, end + 30 * DAY - 60]) {
      await advanceTo(t);
      expect((await sub(id)).status, utc(t)).toBe('past_due');
    }
    await settle();
    expect((await events(id)).slice(before).map((x) => x.e)).toEqual([]);
    expect(mailsTo(email).slice(mailed)).toEqual([]);
    expect(w.requests).toHaveLength(2);

    // At the new end the wallet is charged and pays: renewed from that end.
    await advanceTo(end + 30 * DAY + 60);
    const renewed = await until(
      () => sub(id),
      (x) => x.status === 'active',
    );
    expect(renewed).toMatchObject({ current_period_start: end + 30 * DAY, current_period_end: end + 37 * DAY });
    expect(w.requests).toHaveLength(3);
    expect((await events(id)).filter((x) => x.e === 'renewal.reminder')).toEqual([]);
  });

  it('payment_failed given days by an extend: the next reminder says to pay by the dunning end, not that it renews at the new end', async () => {
    const p = await plan({ name: 'Days granted', grace_period_days: 0 });
    const email = 'days-granted@example.com';
    const co = (await anon().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email })).body;
    expect((await anon().post(`/dev/payments/${co.payment_id}/pay`)).status).toBe(200);
    const id = co.subscription_id as string;
    const end = (
      await until(
        () => sub(id),
        (x) => x.status === 'active',
      )
    ).current_period_end as number;
    // The renewal invoice a day ahead (reminded), then no grace: payment_failed at the end.
    await advanceTo(end - DAY + 60);
    await advanceTo(end + 3600);
    expect(await sub(id)).toMatchObject({ status: 'payment_failed', has_access: false });
    const extended = await admin.post(`/subscriptions/${id}/extend?days=30`);
    expect(extended.body).toMatchObject({ status: 'payment_failed', current_period_end: end + 30 * DAY, has_access: false });
    // The extend keeps the dunning window (DUNNING_DAYS, 14): payable until then, no later.
    const payBy = end + 14 * DAY;

    // Replaced daily as it expires, its invoice reaches the subscriber again a week after the first.
    await advanceTo(end + 6 * DAY + 3600);
    const reminders = (await events(id)).filter((x) => x.e === 'renewal.reminder' && x.d.notify_subscriber === true);
    expect(reminders).toHaveLength(2);
    // Paid while it can be (by the dunning end), the period runs from the payment to the end the days give.
    expect(reminders[1]!.d).toMatchObject({
      status: 'payment_failed',
      pay_by: payBy,
      renewal_period_from_payment: true,
      renewal_period_end: end + 37 * DAY,
      renewal_period_if_paid_by: payBy,
    });
    const said = `The renewal of Days granted (1,000 sats) is unpaid, so your access has ended for now.\nRenewal period: from your payment to ${utc(end + 37 * DAY)}.\n`;
    const got = await until(
      async () => mailsTo(email),
      (m) => m.some((x) => x.text.includes(said)),
    );
    const mail = got.find((x) => x.text.includes(said))!;
    expect(mail.text).toContain(`\nPay it by ${utc(payBy)} to get your access back; after that the subscription ends.\n`);
    // Nothing it says lies past the dunning end: no renewal at the new end, no payment after the window.
    expect(mail.text).not.toContain('renews on');
    expect(mail.text).not.toContain(utc(end + 30 * DAY));
    expect(got.filter((x) => x.text.includes(said))).toHaveLength(1);

    // And it ends there, as the mail said.
    await advanceTo(payBy + 60);
    expect(await sub(id)).toMatchObject({ status: 'expired' });
  });
});
