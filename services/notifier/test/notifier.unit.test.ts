import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { networkInterfaces } from 'node:os';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventEnvelope } from '@sb/contracts';
import { EventName, SubscriberNotice, SWITCHABLE_NOTICES } from '@sb/contracts';
import { ownerMessage, subscriberMessage, subscriberWants } from '../src/domain/messages.js';
import { contactMethods, defaultSettings, mergeSettings, noticeRoute, SettingsError, subscriberTargets, viewSettings } from '../src/domain/settings.js';
import { GIVE_UP_AFTER_S, nextAttemptAt } from '../src/domain/retry.js';
import { checkWebhookUrl, guardedLookup, isPrivateAddress, UrlNotAllowed } from '@sb/runtime';
import { sendWebhook } from '../src/webhook-sender.js';
import { chatIdOf } from '../src/channels/messenger.js';
import { refusedAddresses } from '../src/channels/addresses.js';
import { senderFor, sendEmail, smtpOptions } from '../src/channels/email.js';
import { startSmtpServer } from '../../../test/support/smtp-server.js';
import { resolveRecipient, sendNostr } from '../src/channels/nostr.js';

/** An address of this machine other than loopback (a mail server "elsewhere" for the TLS rule), if it has one. */
const nonLoopback = (): string | undefined =>
  Object.values(networkInterfaces())
    .flat()
    .find((i) => i && !i.internal && i.family === 'IPv4')?.address;

describe('SSRF address check', () => {
  it('refuses loopback, private, link-local, unique-local and mapped addresses; passes public ones', () => {
    for (const a of [
      '127.0.0.1',
      '127.8.9.10',
      '10.1.2.3',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '224.0.0.1',
      '::1',
      '::',
      'fe80::1',
      'fd12:3456::1',
      'fc00::1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '::ffff:a00:1',
      'not an ip',
    ]) {
      expect(isPrivateAddress(a), a).toBe(true);
    }
    for (const a of ['8.8.8.8', '1.1.1.1', '172.32.0.1', '93.184.216.34', '2606:4700:4700::1111', '2001:4860:4860::8888', '::ffff:8.8.8.8']) {
      expect(isPrivateAddress(a), a).toBe(false);
    }
  });

  it('refuses IPv4 hosts inside IPv6 however spelled, local NAT64 and Teredo (found from outside)', () => {
    for (const a of [
      '::127.0.0.1',
      '0:0:0:0:0:0:7f00:1',
      '::ffff:0:7f00:1',
      '::ffff:0:10.0.0.1',
      '2002:7f00:1::',
      '2002:c0a8:101::1',
      '64:ff9b:1::a00:1',
      '2001::1',
      '0::ffff:7f00:1',
    ]) {
      expect(isPrivateAddress(a), a).toBe(true);
    }
    for (const a of ['2002:808:808::1', '64:ff9b::808:808', '::ffff:0:8.8.8.8']) expect(isPrivateAddress(a), a).toBe(false);
  });

  it('refuses port 0 (clients would connect to the default port instead)', async () => {
    await expect(checkWebhookUrl('https://1.1.1.1:0/h', { allowPrivate: false })).rejects.toThrow(/port 0/);
  });

  const off = { allowPrivate: false };
  const dns = (answers: Record<string, string[]>) => async (host: string) => {
    const a = answers[host];
    if (!a) throw new Error('ENOTFOUND');
    return a;
  };

  it('checks the literal host and every DNS answer, unless private addresses are allowed', async () => {
    const resolve = dns({ 'hooks.example.com': ['93.184.216.34'], 'sneaky.example.com': ['93.184.216.34', '10.0.0.7'] });
    await expect(checkWebhookUrl('https://hooks.example.com/x', off, resolve)).resolves.toBeUndefined();
    await expect(checkWebhookUrl('http://8.8.8.8/x', off, resolve)).resolves.toBeUndefined();
    await expect(checkWebhookUrl('http://127.0.0.1:8080/x', off, resolve)).rejects.toThrow(/private, loopback or link-local address \(127\.0\.0\.1\)/);
    await expect(checkWebhookUrl('http://[::1]/x', off, resolve)).rejects.toThrow(UrlNotAllowed);
    await expect(checkWebhookUrl('http://169.254.169.254/latest/meta-data', off, resolve)).rejects.toThrow(UrlNotAllowed);
    await expect(checkWebhookUrl('https://sneaky.example.com/', off, resolve)).rejects.toThrow(/10\.0\.0\.7/);
    await expect(checkWebhookUrl('https://nowhere.example.com/', off, resolve)).rejects.toThrow(/does not resolve/);
    await expect(checkWebhookUrl('ftp://hooks.example.com/', off, resolve)).rejects.toThrow(/http/);
    // The real resolver: localhost is loopback on every machine.
    await expect(checkWebhookUrl('http://localhost:9/x', off)).rejects.toThrow(/127\.0\.0\.1|::1/);
    await expect(checkWebhookUrl('http://127.0.0.1:8080/x', { allowPrivate: true }, resolve)).resolves.toBeUndefined();
  });

  it('the lookup used for connecting refuses a name that resolves to a private address', async () => {
    const err = await new Promise<Error | null>((r) => guardedLookup(off)('localhost', { family: 0 }, (e) => r(e)));
    expect(err).toBeInstanceOf(UrlNotAllowed);
    const ok = await new Promise<string>((r, j) => guardedLookup({ allowPrivate: true })('localhost', { family: 0 }, (e, a) => (e ? j(e) : r(a as string))));
    expect(isPrivateAddress(ok)).toBe(true);
  });
});

describe('webhook sender', () => {
  let server: Server;
  let port: number;
  const got: { headers: Record<string, string>; body: string }[] = [];
  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        got.push({ headers: req.headers as Record<string, string>, body });
        res.writeHead(req.url === '/fail' ? 500 : 204).end(req.url === '/fail' ? 'boom' : undefined);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const secret = `whsec_${Buffer.from('0123456789abcdef01234567').toString('base64')}`;
  const body = JSON.stringify({ event: 'subscription.created', timestamp: 1700000000, data: { plan_id: 'plan_1', plan_name: 'P' } });

  it('signs per Standard Webhooks; a refused address is never contacted', async () => {
    const ok = await sendWebhook({ url: `http://localhost:${port}/ok`, secret, eventId: 'evt_1', body }, { policy: { allowPrivate: true }, timeoutMs: 2000 });
    expect(ok).toMatchObject({ delivered: true, status_code: 204, error: null });
    const h = got.at(-1)!;
    expect(h.headers['webhook-id']).toBe('evt_1');
    expect(h.body).toBe(body);
    expect(new Webhook(secret).verify(h.body, h.headers)).toEqual(JSON.parse(body));
    // Another secret does not verify: the signature really depends on it.
    expect(() => new Webhook(`whsec_${Buffer.from('another-secret-of-24byte').toString('base64')}`).verify(h.body, h.headers)).toThrow();

    const failed = await sendWebhook(
      { url: `http://127.0.0.1:${port}/fail`, secret, eventId: 'evt_2', body },
      { policy: { allowPrivate: true }, timeoutMs: 2000 },
    );
    expect(failed).toMatchObject({ delivered: false, status_code: 500, error: 'HTTP 500: boom' });

    const before = got.length;
    for (const url of [`http://127.0.0.1:${port}/ok`, `http://localhost:${port}/ok`]) {
      const refused = await sendWebhook({ url, secret, eventId: 'evt_3', body }, { policy: { allowPrivate: false }, timeoutMs: 2000 });
      expect(refused).toMatchObject({ delivered: false, status_code: null });
      expect(refused.error).toMatch(/^URL not allowed/);
    }
    expect(got.length).toBe(before);
  });

  it('keeps the connection to a receiver between deliveries, each signed; one policy never uses the connections of the other', async () => {
    const connections: string[] = [];
    const seen: string[] = [];
    const keep = createServer((req, res) => {
      let raw = '';
      req.on('data', (c) => (raw += c));
      req.on('end', () => {
        seen.push(String(req.headers['webhook-id']));
        expect(new Webhook(secret).verify(raw, req.headers as Record<string, string>)).toEqual(JSON.parse(body));
        res.writeHead(200).end();
      });
    });
    keep.on('connection', (s) => connections.push(String(s.remotePort)));
    await new Promise<void>((r) => keep.listen(0, '127.0.0.1', r));
    const url = `http://localhost:${(keep.address() as AddressInfo).port}/hook`;
    try {
      for (const id of ['evt_k1', 'evt_k2', 'evt_k3']) {
        expect(await sendWebhook({ url, secret, eventId: id, body }, { policy: { allowPrivate: true }, timeoutMs: 2000 })).toMatchObject({ delivered: true });
      }
      expect(seen).toEqual(['evt_k1', 'evt_k2', 'evt_k3']);
      expect(connections).toHaveLength(1);
      // An open connection to a loopback receiver is no way around the address check of a stricter policy.
      const refused = await sendWebhook({ url, secret, eventId: 'evt_k4', body }, { policy: { allowPrivate: false }, timeoutMs: 2000 });
      expect(refused).toMatchObject({ delivered: false, status_code: null });
      expect(refused.error).toMatch(/^URL not allowed: it names host localhost, which resolves to a private address/);
      expect(seen).toHaveLength(3);
    } finally {
      keep.closeAllConnections();
      await new Promise<void>((r) => keep.close(() => r()));
    }
  });
});

describe('retry schedule', () => {
  it('backs off, pulls the last try in to the 3-day deadline, then gives up', () => {
    const t0 = 1_000_000;
    expect(nextAttemptAt(1, t0, t0)).toBe(t0 + 30);
    expect(nextAttemptAt(2, t0, t0 + 30)).toBe(t0 + 150);
    expect(nextAttemptAt(3, t0, t0 + 150)).toBe(t0 + 750);
    expect(nextAttemptAt(20, t0, t0 + 100)).toBe(t0 + 100 + 86_400);
    expect(nextAttemptAt(8, t0, t0 + GIVE_UP_AFTER_S - 10)).toBe(t0 + GIVE_UP_AFTER_S);
    expect(nextAttemptAt(9, t0, t0 + GIVE_UP_AFTER_S)).toBeNull();
  });
});

describe('subscriber notices', () => {
  const ev = (event: EventEnvelope['event'], data: Record<string, unknown>): EventEnvelope => ({
    id: 'evt_x',
    wallet_id: 'wal_x',
    event,
    timestamp: 1_700_000_000,
    data: { plan_id: 'plan_1', plan_name: 'Gold', subscription_id: 'sub_1', ...data },
  });
  const all = [...SubscriberNotice.options];

  it('cancellations always; reminders and confirmations only when the subscriber opted in and the owner left them on', () => {
    expect(subscriberWants(ev('subscription.cancelled', {}), [])).toBe(true);
    expect(subscriberWants(ev('renewal.reminder', { notify_subscriber: true }), all)).toBe(true);
    expect(
      subscriberWants(
        ev('renewal.reminder', { notify_subscriber: true }),
        all.filter((e) => e !== 'renewal.reminder'),
      ),
    ).toBe(false);
    expect(subscriberWants(ev('renewal.reminder', { notify_subscriber: false }), all)).toBe(false);
    // A trial's last reminder is its end notice too: sent when the owner chose either (review finding).
    const trialEnd = ev('renewal.reminder', { notify_subscriber: true, trial_end: 1_700_086_400 });
    expect(subscriberWants(trialEnd, ['subscription.trial_ending'])).toBe(true);
    expect(subscriberWants(trialEnd, ['renewal.reminder'])).toBe(true);
    expect(subscriberWants(trialEnd, ['subscription.cancelled'])).toBe(false);
    expect(subscriberWants(ev('renewal.reminder', { notify_subscriber: true }), ['subscription.trial_ending'])).toBe(false);
    expect(subscriberWants(ev('subscription.activated', {}), all)).toBe(false);
    expect(subscriberWants(ev('subscription.activated', { receive_confirmations: true }), all)).toBe(true);
    expect(subscriberWants(ev('subscription.paused', { notify_subscriber: true }), all)).toBe(false);
  });

  it('messages carry the pay link, amount, dates in UTC and the portal link, as text and HTML', () => {
    const who = { name: 'Ann', manageUrl: 'http://x/subscriptions_manager/manage?token=t0k', merchant: 'Shop & Co' };
    const reminder = subscriberMessage(ev('renewal.reminder', { payment_request: 'lnbc10n1xyz', due_at: 1_700_086_400, amount_sats: 1000 }), who);
    expect(reminder.text).toContain('lightning:lnbc10n1xyz');
    expect(reminder.text).toContain('1,000 sats');
    expect(reminder.text).toContain('2023-11-15 22:13 UTC');
    expect(reminder.text).toContain(who.manageUrl);
    expect(reminder.html).toContain('<a href="lightning:lnbc10n1xyz">');
    expect(reminder.text.split('\n').at(-1)).toBe('— Shop & Co');
    expect(reminder.html).toContain('— Shop &#38; Co');
    expect(subscriberMessage(ev('renewal.reminder', { checkout_url: 'https://pay.example/c' }), who).text).toContain('https://pay.example/c');
    // Days granted after access ended (review finding): from the payment to a fixed end while they last.
    const granted = subscriberMessage(
      ev('renewal.reminder', {
        renewal_period_start: 1_700_000_000,
        renewal_period_end: 1_705_000_000,
        renewal_period_from_payment: true,
        renewal_period_if_paid_by: 1_702_000_000,
      }),
      who,
    );
    expect(granted.text).toContain('Renewal period: from your payment to 2024-01-11 19:06 UTC if paid by 2023-12-08 01:46 UTC; paid later,');
    const resumed = subscriberMessage(ev('renewal.reminder', { reason: 'resumed', payment_request: 'lnbc1r', due_at: 1_700_086_400, amount_sats: 1000 }), who);
    expect(resumed.text).toContain('was resumed: its new period starts when you pay 1,000 sats');
    expect(resumed.text).not.toContain('renews on');
    expect(resumed.text).toContain('lightning:lnbc1r');
    const cancelled = subscriberMessage(ev('subscription.cancelled', { cancel_reason: 'cancelled by subscriber', current_period_end: 1_700_086_400 }), who);
    expect(cancelled.text).toMatch(/cancelled by you.*\n.*access continues until 2023-11-15 22:13 UTC/);
    // Nothing left to pay or cancel (found from outside: "Manage, pay or cancel" under a cancellation).
    expect(cancelled.text).toContain(`Manage your subscription:\n${who.manageUrl}`);
    expect(cancelled.text).not.toContain('pay or cancel');
    expect(subscriberMessage(ev('subscription.renewed', { amount_sats: 5000, current_period_end: 1_702_000_000 }), {}).text).toMatch(
      /renewed until 2023-12-08 .* UTC; you paid 5,000 sats/,
    );
    expect(subscriberMessage(ev('subscription.activated', {}), { name: '<b>' }).html).toContain('Hello &#60;b&#62;,');
  });

  it('a renewal after the cancel (paid before it, handled after) is the same receipt, not a thank-you for a renewal', () => {
    const paid = { status: 'cancelled', payment_id: 'pay_2', amount_sats: 5000, current_period_start: 1_699_999_000, current_period_end: 1_702_592_000 };
    const late = subscriberMessage(ev('subscription.renewed', paid), {});
    expect(late.subject).toBe('Payment received for Gold');
    expect(late.text).toContain('Your subscription was cancelled, so it will not renew; your access continues until 2023-12-14 22:13 UTC.');
    expect(late.text).not.toMatch(/was renewed|Thank you/);
    expect(subscriberMessage(ev('subscription.renewed', { ...paid, status: 'paused' }), {}).text).toContain('was renewed');
  });

  it('an activation after the cancel (a checkout paid before it, handled after) is a receipt, not a welcome', () => {
    const who = { manageUrl: 'http://x/subscriptions_manager/manage?token=t0k' };
    const paid = {
      status: 'cancelled',
      payment_id: 'pay_1',
      amount_sats: 5000,
      payment_method: 'lightning',
      current_period_start: 1_699_999_000,
      current_period_end: 1_702_592_000,
    };
    const late = subscriberMessage(ev('subscription.activated', paid), who);
    expect(late.subject).toBe('Payment received for Gold');
    expect(late.text).toContain(
      'We received your payment of 5,000 sats for Gold. Your subscription was cancelled, so it will not renew; your access continues until 2023-12-14 22:13 UTC.',
    );
    expect(late.text).not.toMatch(/is active|Thank you/);
    expect(late.text).toContain('Payment reference: pay_1');
    expect(late.text).toContain('Period: 2023-11-14 21:56 UTC to 2023-12-14 22:13 UTC');
    // Nothing left to pay or cancel.
    expect(late.text).toContain(`Manage your subscription:\n${who.manageUrl}`);
    expect(late.text).not.toContain('pay or cancel');
    // Its period already over when the payment was handled (review finding): no "continues until" a past date.
    const over = subscriberMessage(ev('subscription.activated', { ...paid, current_period_end: 1_600_000_000 }), who);
    expect(over.text).toContain('Your subscription was cancelled, so it will not renew; your access has ended.');
    expect(over.text).not.toContain('continues until');
    // So is a renewal paid before the cancel, handled after it: not "renewed ... Thank you!".
    const renewed = subscriberMessage(ev('subscription.renewed', paid), who);
    expect(renewed.subject).toBe('Payment received for Gold');
    expect(renewed.text).toContain('Your subscription was cancelled, so it will not renew; your access continues until 2023-12-14 22:13 UTC.');
    expect(renewed.text).not.toMatch(/was renewed|Thank you/);
    // An activation of a live subscription is unchanged.
    expect(subscriberMessage(ev('subscription.activated', { ...paid, status: 'active' }), who).text).toContain(
      'Your subscription to Gold is active until 2023-12-14 22:13 UTC; you paid 5,000 sats. Thank you!',
    );
  });

  it('card and PayPal receipts and reminders say what was charged in fiat, with the sats beside it (found from outside)', () => {
    const paid = {
      payment_id: 'pay_1',
      amount_sats: 21_000,
      amount_fiat: 21,
      currency: 'usd',
      current_period_start: 1_700_000_000,
      current_period_end: 1_702_592_000,
    };
    const card = subscriberMessage(ev('subscription.activated', { ...paid, payment_method: 'cardproc' }), {});
    expect(card.text).toContain('Amount: $21.00 USD (21,000 sats)');
    expect(card.text).toContain('you paid $21.00 USD (21,000 sats)');
    expect(card.text).toContain('Paid with: card');
    const yen = subscriberMessage(ev('subscription.renewed', { ...paid, amount_fiat: 2100, currency: 'jpy', payment_method: 'walletproc' }), {});
    expect(yen.text).toContain('Amount: ¥2,100 JPY (21,000 sats)');
    const reminder = subscriberMessage(ev('renewal.reminder', { ...paid, due_at: 1_700_086_400, checkout_url: 'https://pay.example/c' }), {});
    expect(reminder.text).toContain('renews on 2023-11-15 22:13 UTC for $21.00 USD (21,000 sats).');
    const overdue = subscriberMessage(ev('renewal.reminder', { ...paid, due_at: 1_699_000_000 }), {});
    expect(overdue.text).toContain('The renewal of Gold ($21.00 USD, 21,000 sats) was due on');
    expect(ownerMessage(ev('payment.received', { ...paid, payment_method: 'cardproc' })).text).toContain('Amount: $21.00 USD (21,000 sats)');
    // Bitcoin payments: the sats alone, as before.
    expect(subscriberMessage(ev('subscription.activated', { ...paid, amount_fiat: undefined, currency: undefined }), {}).text).toContain('Amount: 21,000 sats');
  });

  it('reminders, trial endings and dunning notices say the period the renewal pays for, as receipts do (found from outside)', () => {
    const card = { amount_sats: 50_000, amount_fiat: 50, currency: 'usd', payment_method: 'cardproc' };
    // The current period ends on 11-15; paid in time, the renewal continues from there.
    const inTime = {
      current_period_start: 1_697_494_400,
      current_period_end: 1_700_086_400,
      renewal_period_start: 1_700_086_400,
      renewal_period_end: 1_702_678_400,
    };
    const period = 'Renewal period: 2023-11-15 22:13 UTC to 2023-12-15 22:13 UTC';
    const reminder = subscriberMessage(ev('renewal.reminder', { ...card, ...inTime, due_at: 1_700_086_400, checkout_url: 'https://pay.example/c' }), {});
    expect(reminder.text).toContain(`Your subscription to Gold renews on 2023-11-15 22:13 UTC for $50.00 USD (50,000 sats).\n${period}\n`);
    const trial = subscriberMessage(ev('subscription.trial_ending', { ...card, ...inTime, trial_end: 1_700_086_400 }), {});
    expect(trial.text).toContain(`To keep access, pay the renewal of $50.00 USD (50,000 sats) we sent you.\n${period}\n`);
    const pastDue = subscriberMessage(ev('subscription.past_due', { ...card, ...inTime, status: 'past_due', pay_by: 1_700_345_600 }), {});
    expect(pastDue.text).toContain(
      `The renewal of Gold ($50.00 USD, 50,000 sats) was not paid by the end of your period.\n${period}\nYour access continues until`,
    );
    // Access ended: paying starts a new period, dated as if paid at the notice's time.
    const ended = {
      current_period_start: 1_696_408_000,
      current_period_end: 1_699_000_000,
      renewal_period_start: 1_700_000_000,
      renewal_period_end: 1_702_592_000,
    };
    const failed = subscriberMessage(ev('subscription.payment_failed', { ...card, ...ended, status: 'payment_failed', pay_by: 1_700_345_600 }), {});
    expect(failed.text).toContain(
      'The renewal of Gold ($50.00 USD, 50,000 sats) is unpaid, so your access has ended for now.\nRenewal period if paid now: 2023-11-14 22:13 UTC to 2023-12-14 22:13 UTC\nPay it by',
    );
    // Without the period (events from before), nothing about it.
    expect(subscriberMessage(ev('renewal.reminder', { due_at: 1_700_086_400 }), {}).text).not.toContain('Renewal period');
  });

  it('e-mail shows the one-click link of its kind; every message says the portal is where notices are chosen (found from outside)', () => {
    const who = { manageUrl: 'http://x/manage?token=t', merchant: 'Shop', unsubscribe: 'http://x/api/v1/public/unsubscribe/u1' };
    const reminder = subscriberMessage(ev('renewal.reminder', { due_at: 1_700_086_400, amount_sats: 1000 }), who);
    expect(reminder.text).toContain(
      'http://x/manage?token=t\nYou also choose there which notices you get.\nStop these reminders: http://x/api/v1/public/unsubscribe/u1\n— Shop',
    );
    expect(reminder.html).toContain('<p>Stop these reminders: <a href="http://x/api/v1/public/unsubscribe/u1">http://x/api/v1/public/unsubscribe/u1</a></p>');
    expect(reminder.unsubscribe).toBe(who.unsubscribe);
    expect(subscriberMessage(ev('subscription.renewed', { amount_sats: 1000 }), who).text).toContain(
      'Stop these confirmations: http://x/api/v1/public/unsubscribe/u1',
    );
    // Always-sent notices offer no unsubscribe; a chat message (no link given) only the portal.
    const cancelled = subscriberMessage(ev('subscription.cancelled', { current_period_end: 1_700_086_400 }), who);
    expect([cancelled.text.includes('Stop these'), cancelled.unsubscribe]).toEqual([false, undefined]);
    const chat = subscriberMessage(ev('renewal.reminder', { due_at: 1_700_086_400 }), { ...who, unsubscribe: undefined });
    expect(chat.text).toContain('You also choose there which notices you get.');
    expect(chat.text).not.toContain('Stop these');
  });

  it('a past-due notice says until when to pay, and for a wallet that is asked again, that it will be', () => {
    const byInvoice = subscriberMessage(ev('subscription.past_due', { amount_sats: 1000, pay_by: 1_700_086_400 }), {});
    expect(byInvoice.subject).toBe('Payment overdue for Gold');
    expect(byInvoice.text).toContain('Your access continues until 2023-11-15 22:13 UTC; pay it before then to keep it.');
    const byWallet = subscriberMessage(ev('subscription.past_due', { amount_sats: 1000, pay_by: 1_700_086_400, wallet_retries: true }), {});
    expect(byWallet.text).toContain(
      'Your connected wallet could not pay it and will be asked again until 2023-11-15 22:13 UTC, while your access continues; you can also pay it yourself.',
    );
    expect(byWallet.text).not.toContain('pay it before then');
  });

  it('a dunning step taken before the invoice was made (the scheduler away): its invoice follows, not "the portal has one" (review finding)', () => {
    const data = { amount_sats: 1000, pay_by: 1_700_086_400, invoice_to_follow: true };
    const withPortal = subscriberMessage(ev('subscription.payment_failed', data), { manageUrl: 'http://x/manage?token=t' });
    expect(withPortal.text).toContain('Its invoice follows in a separate message, and your portal will have it to pay: http://x/manage?token=t');
    expect(withPortal.text).not.toContain('has a payable invoice');
    const bare = subscriberMessage(ev('subscription.past_due', data), {});
    expect(bare.text).toContain('Its invoice follows in a separate message.');
    expect(bare.text).not.toContain('has a payable invoice');
  });

  it('a renewal no invoice could be made for: the notice says so and that one is tried daily, not that the portal has one (found from outside)', () => {
    const data = { amount_sats: 1000, pay_by: 1_700_086_400, renewal_refused: 'below the smallest amount the card processor takes' };
    const withPortal = subscriberMessage(ev('subscription.past_due', data), { manageUrl: 'http://x/manage?token=t' });
    expect(withPortal.text).toContain(
      'An invoice for it could not be made this time; we try again daily, and your portal will have it to pay: http://x/manage?token=t',
    );
    expect(withPortal.text).not.toContain('always has a payable invoice');
    // The merchant's reason is theirs (the owner's event carries it), not the subscriber's.
    expect(withPortal.text).not.toContain('smallest amount');
    const bare = subscriberMessage(ev('subscription.payment_failed', data), {});
    expect(bare.text).toContain('An invoice for it could not be made this time; we try again daily.');
    expect(bare.text).not.toContain('has a payable invoice');
    // Ended with no invoice ever made: not "was not paid in time".
    const ended = subscriberMessage(ev('subscription.expired', { reason: 'renewal unpaid at the end of the dunning window', renewal_refused: 'x' }), {});
    expect(ended.text).toContain('has expired: no invoice could be made for its renewal.');
    // The owner's message gives the reason.
    expect(ownerMessage(ev('subscription.past_due', data)).text).toContain(
      'No renewal invoice could be made: below the smallest amount the card processor takes',
    );
  });

  it("an NWC attempt the wallet may still pay is said so in the owner's notice; a refusal is not", () => {
    const failed = { plan_name: 'Gold', plan_id: 'plan_1', payment_id: 'pay_1', status: 'failed', amount_sats: 1000, error_code: 'OTHER' };
    const late = ownerMessage(
      ev('payment.failed', { ...failed, error_message: 'The wallet did not answer the payment request within 30 seconds', may_still_pay: true }),
    );
    expect(late.text).toContain('Wallet answer: OTHER (The wallet did not answer the payment request within 30 seconds)');
    expect(late.text).toContain('The wallet may still pay it in the next few minutes: a payment received then counts.');
    const refused = ownerMessage(ev('payment.failed', { ...failed, error_code: 'INSUFFICIENT_BALANCE', error_message: 'Empty' }));
    expect(refused.text).toContain('Wallet answer: INSUFFICIENT_BALANCE (Empty)');
    expect(refused.text).not.toContain('may still pay');
  });

  it("right-to-left names are isolated in the e-mail's HTML, so the figures beside them keep their order (found by reading the code)", () => {
    const data = { plan_name: 'זהב & <co>', amount_sats: 21_000, pay_by: 1_700_086_400, subscriber_name: 'محمد' };
    const m = subscriberMessage(ev('subscription.past_due', data), { name: 'محمد', merchant: 'Shop', manageUrl: 'http://x/m' });
    expect(m.html).toContain('<p>The renewal of <bdi>זהב &#38; &#60;co&#62;</bdi> (21,000 sats) was not paid by the end of your period.</p>');
    expect(m.html).toContain('<p>Hello <bdi>محمد</bdi>,</p>');
    // A left-to-right name is left as it is; the text part is unchanged.
    expect(m.html).toContain('<p>— Shop</p>');
    expect(m.text).toContain('The renewal of זהב & <co> (21,000 sats) was not paid');
    expect(m.text).not.toContain('bdi');
    const owner = ownerMessage(ev('subscription.created', { ...data, status: 'pending' }));
    expect(owner.html).toContain('<bdi>זהב &#38; &#60;co&#62;</bdi>');
    expect(owner.html).toContain('Subscriber: <bdi>محمد</bdi>');
    // A name inside another (the reader's inside the plan's) isolates the longer one whole.
    const nested = subscriberMessage(ev('subscription.activated', { plan_name: 'אבג' }), { name: 'א' });
    expect(nested.html).toContain('<p>Hello <bdi>א</bdi>,</p>');
    expect(nested.html).toContain('<bdi>אבג</bdi>');
    expect(nested.html).not.toContain('<bdi>א</bdi>בג');
  });

  it('a wallet that did not pay is said to have failed, and the notices that follow agree (found from outside)', () => {
    // Grace 0: one failure ends access; the notice names the wallet and how to pay.
    const ended = subscriberMessage(ev('subscription.payment_failed', { amount_sats: 21_000, pay_by: 1_700_086_400, wallet_failed: true }), {});
    expect(ended.text).toContain(
      'The renewal of Gold (21,000 sats) is unpaid, so your access has ended for now.\nYour connected wallet could not pay it and is no longer asked to.\nPay it by 2023-11-15 22:13 UTC to get your access back',
    );
    // The past-due notice of a wallet still asked does not also say it is no longer asked.
    const retried = subscriberMessage(ev('subscription.past_due', { amount_sats: 1, pay_by: 1_700_086_400, wallet_failed: true, wallet_retries: true }), {});
    expect(retried.text).not.toContain('no longer asked');
    // Then the wallet is disconnected: the reminder says it is no longer asked, not that it "could not pay" as news.
    const after = subscriberMessage(ev('renewal.reminder', { reason: 'nwc_wallet_unavailable', due_at: 1_699_000_000, payment_request: 'lnbc1' }), {});
    expect(after.text).toContain('Your connected wallet is no longer asked to pay it (it failed or was disconnected), so please pay it yourself.');
  });

  // Found by reading every message a lifecycle sends (a helper session with real SMTP, Telegram and Nostr).
  it('names and plan names cannot write lines of their own, nor turn a line around', () => {
    const forged = 'Frank\nAmount: 1 sats\nPay here instead: https://evil.example/pay';
    const owner = ownerMessage(ev('subscription.created', { subscriber_name: forged, plan_name: 'Gold\u202eevil', amount_sats: 1000, status: 'pending' }));
    const lines = owner.text.split('\n');
    expect(lines.filter((l) => l.startsWith('Amount:'))).toEqual(['Amount: 1,000 sats']);
    expect(lines.some((l) => l.startsWith('Pay here instead'))).toBe(false);
    expect(lines).toContain('Subscriber: Frank Amount: 1 sats Pay here instead: https://evil.example/pay');
    expect(owner.text).not.toMatch(/[\u202a-\u202e\u2066-\u2069\u200b]/);
    const greeting = subscriberMessage(ev('subscription.activated', {}), { name: 'Zed\u202e\u200bX\r\nBcc: x' }).text.split('\n')[0];
    expect(greeting).toBe('Hello Zed X Bcc: x,');
    // The joiners of emoji and of some scripts stay (found in review: they became spaces).
    for (const name of ['👨‍👩‍👧 Family', 'می‌شود']) {
      expect(subscriberMessage(ev('subscription.activated', {}), { name }).text.split('\n')[0]).toBe(`Hello ${name},`);
    }
  });

  it('a reminder after the period ended says it is overdue, not that it renews on a date gone by', () => {
    const late = subscriberMessage(
      ev('renewal.reminder', { reason: 'nwc_wallet_unavailable', due_at: 1_700_000_000 - 3600, amount_sats: 3000, payment_request: 'lnbc1' }),
      {},
    );
    expect(late.text).toContain('The renewal of Gold (3,000 sats) was due on 2023-11-14 21:13 UTC and is not paid yet.');
    expect(late.text).not.toContain('renews on');
  });

  it('a reminder once access ended (payment_failed) says to pay by the dunning end, even when an extend moved the period end past it', () => {
    const base = { status: 'payment_failed', amount_sats: 3000, interval: 'weekly', payment_request: 'lnbc1' };
    // Extended by 30 days: due_at (the period end) is ahead, the window ends before it.
    const extended = subscriberMessage(
      ev('renewal.reminder', {
        ...base,
        due_at: 1_700_000_000 + 30 * 86_400,
        pay_by: 1_700_000_000 + 14 * 86_400,
        renewal_period_start: 1_700_000_000,
        renewal_period_end: 1_700_000_000 + 37 * 86_400,
        renewal_period_from_payment: true,
        renewal_period_if_paid_by: 1_700_000_000 + 14 * 86_400,
      }),
      {},
    );
    expect(extended.text).toContain('The renewal of Gold (3,000 sats) is unpaid, so your access has ended for now.');
    expect(extended.text).toContain('\nRenewal period: from your payment to 2023-12-21 22:13 UTC.\n');
    expect(extended.text).toContain('Pay it by 2023-11-28 22:13 UTC to get your access back; after that the subscription ends.');
    expect(extended.text).not.toContain('renews on');
    expect(extended.text).not.toContain('paid later');
    // Not extended: overdue, and the same deadline.
    const plain = subscriberMessage(ev('renewal.reminder', { ...base, due_at: 1_700_000_000 - 3600, pay_by: 1_700_000_000 + 13 * 86_400 }), {});
    expect(plain.text).toContain('Pay it by 2023-11-27 22:13 UTC to get your access back');
    // past_due keeps its words: its access continues, and the renewal period says until when.
    const pastDue = subscriberMessage(
      ev('renewal.reminder', { ...base, status: 'past_due', due_at: 1_700_000_000 - 3600, pay_by: 1_700_000_000 + 13 * 86_400 }),
      {},
    );
    expect(pastDue.text).toContain('The renewal of Gold (3,000 sats) was due on 2023-11-14 21:13 UTC and is not paid yet.');
    expect(pastDue.text).not.toContain('Pay it by');
  });

  it('a trial says when it ends and what follows; a cancelled checkout never paid charged nothing; an ended one is not managed', () => {
    const trial = subscriberMessage(ev('subscription.created', { trial: true, current_period_end: 1_700_086_400, amount_sats: 2100 }), {});
    expect(trial.text).toContain('Your free trial of Gold has started; it ends on 2023-11-15 22:13 UTC.');
    expect(trial.text).toContain('After it, the subscription costs 2,100 sats each period; we will remind you before it ends.');
    // With the plan's interval (found from outside: the amount without what it is for).
    const monthly = subscriberMessage(ev('subscription.created', { trial: true, amount_sats: 5000, interval: 'monthly' }), {});
    expect(monthly.text).toContain('After it, the subscription costs 5,000 sats per month; we will remind you before it ends.');
    const ending = subscriberMessage(ev('subscription.trial_ending', { trial_end: 1_700_086_400, amount_sats: 5000 }), {});
    expect(ending.text).toContain('Your free trial of Gold ends on 2023-11-15 22:13 UTC.\nTo keep access, pay the renewal of 5,000 sats we sent you.');
    const byWallet = subscriberMessage(ev('subscription.trial_ending', { trial_end: 1_700_086_400, amount_sats: 5000, wallet_pays: true }), {});
    expect(byWallet.text).toContain('Your connected wallet will then be asked to pay the renewal of 5,000 sats.');
    expect(byWallet.text).not.toContain('we sent you');
    const lapsed = subscriberMessage(ev('subscription.past_due', { amount_sats: 5000, pay_by: 1_700_086_400, after_trial: true }), {});
    expect(lapsed.text).toContain('The renewal of Gold (5,000 sats) was not paid by the end of your free trial.');
    const never = subscriberMessage(
      ev('subscription.cancelled', {
        cancel_reason: 'plan archived',
        previous_status: 'pending',
        current_period_start: 1_699_000_000,
        current_period_end: 1_699_000_000,
      }),
      { manageUrl: 'http://x/manage?token=t' },
    );
    expect(never.text).toContain('was cancelled by the merchant, who discontinued the plan. Nothing was charged.');
    expect(never.text).not.toContain('access');
    // Cancelled at once after paying a period ahead: its period also starts and ends now (found in review).
    const paidAhead = subscriberMessage(
      ev('subscription.cancelled', {
        cancel_reason: 'fraud',
        previous_status: 'active',
        current_period_start: 1_700_000_000,
        current_period_end: 1_700_000_000,
      }),
      {},
    );
    expect(paidAhead.text).toContain('was cancelled by the merchant. You will not be charged again.');
    expect(paidAhead.text).toContain('Your access has ended.');
    // A free trial cancelled: never charged, so nothing "again" (found from outside).
    const trialCancelled = subscriberMessage(
      ev('subscription.cancelled', { cancelled_by: 'subscriber', previous_status: 'active', in_trial: true, current_period_end: 1_700_086_400 }),
      {},
    );
    expect(trialCancelled.text).toContain('was cancelled by you. It was in its free trial: nothing was charged.');
    expect(trialCancelled.text).toContain('Your access continues until');
    // Archived in its trial: the trial is said apart from the merchant's reason (review: "discontinued the plan during its free trial").
    const archivedTrial = subscriberMessage(
      ev('subscription.cancelled', { cancelled_by: 'plan_archived', in_trial: true, never_paid: true, current_period_end: 1_700_086_400 }),
      {},
    );
    expect(archivedTrial.text).toContain('was cancelled by the merchant, who discontinued the plan. It was in its free trial: nothing was charged.');
    // A trial that ended unpaid (past_due), then cancelled: never charged either (review).
    const lapsedTrial = subscriberMessage(
      ev('subscription.cancelled', { cancelled_by: 'merchant', previous_status: 'past_due', never_paid: true, current_period_end: 1_700_086_400 }),
      {},
    );
    expect(lapsedTrial.text).toContain('was cancelled by the merchant. Nothing was charged.');
    const expired = subscriberMessage(ev('subscription.expired', {}), { manageUrl: 'http://x/manage?token=t' });
    expect(expired.text).toContain('Your subscriptions and receipts:');
    expect(expired.text).not.toContain('Manage, pay or cancel');
    // The subscription's id is for receipts (a reference), not every message.
    expect(expired.text).not.toContain('sub_1');
    expect(subscriberMessage(ev('subscription.renewed', { payment_id: 'pay_1', amount_sats: 1 }), {}).text).toContain('Subscription reference: sub_1');
  });

  // Found by a stranger reading every message on every channel (local SMTP, Telegram Bot API, Nostr relay).
  it("who cancelled is the event's cancelled_by, never guessed from the reason an owner typed (found from outside)", () => {
    const who = { manageUrl: 'http://x/manage?token=t' };
    const cancel = (data: Record<string, unknown>) => subscriberMessage(ev('subscription.cancelled', { current_period_end: 1_700_086_400, ...data }), who).text;
    const byOwner = cancel({ cancelled_by: 'merchant', cancel_reason: 'cancelled by subscriber' });
    expect(byOwner).toContain('Your subscription to Gold was cancelled by the merchant. You will not be charged again.');
    expect(byOwner).not.toContain('by you');
    expect(cancel({ cancelled_by: 'merchant', cancel_reason: 'plan archived' })).not.toContain('discontinued');
    expect(cancel({ cancelled_by: 'subscriber', cancel_reason: 'cancelled by subscriber' })).toContain('was cancelled by you.');
    expect(cancel({ cancelled_by: 'plan_archived', cancel_reason: 'plan archived' })).toContain('was cancelled by the merchant, who discontinued the plan.');
    // An event from before cancelled_by: told from the reasons the service writes, as before.
    expect(cancel({ cancel_reason: 'cancelled by subscriber' })).toContain('was cancelled by you.');
    expect(cancel({ cancel_reason: 'too pricey' })).toContain('was cancelled by the merchant.');
    // The owner reads who cancelled, and their own note only where it is one.
    const owner = (data: Record<string, unknown>) => ownerMessage(ev('subscription.cancelled', { status: 'cancelled', ...data })).text;
    const ownNote = owner({ cancelled_by: 'merchant', cancel_reason: 'cancelled by subscriber' });
    expect(ownNote).toContain('Cancelled by: you (API)\nCancel reason: cancelled by subscriber');
    const portal = owner({ cancelled_by: 'subscriber', cancel_reason: 'cancelled by subscriber' });
    expect(portal).toContain('Cancelled by: the subscriber (portal)');
    expect(portal).not.toContain('Cancel reason');
    expect(owner({ cancelled_by: 'plan_archived', cancel_reason: 'plan archived' })).toContain('Cancelled by: you, archiving the plan');
  });

  it('a cancelled subscription has no notice switches: its notices do not point to them (found from outside)', () => {
    const who = { manageUrl: 'http://x/manage?token=t' };
    const continuing = subscriberMessage(ev('subscription.cancelled', { cancelled_by: 'merchant', current_period_end: 1_700_086_400 }), who);
    expect(continuing.text).toContain('Your access continues until 2023-11-15 22:13 UTC.');
    expect(continuing.text).toContain(`Manage your subscription:\n${who.manageUrl}`);
    expect(continuing.text).not.toContain('which notices you get');
    const receipt = subscriberMessage(
      ev('subscription.activated', {
        status: 'cancelled',
        payment_id: 'pay_1',
        amount_sats: 5000,
        current_period_start: 1_699_999_000,
        current_period_end: 1_702_592_000,
      }),
      who,
    );
    expect(receipt.text).toContain('Your subscription was cancelled, so it will not renew; your access continues until');
    expect(receipt.text).not.toContain('which notices you get');
    // A live subscription's notices still say where the switches are.
    expect(subscriberMessage(ev('subscription.renewed', { amount_sats: 1 }), who).text).toContain('You also choose there which notices you get.');
  });

  it("the owner's notice of a payment not applied shows the payment paid, and the status as the subscription's (found from outside)", () => {
    const text = ownerMessage(
      ev('payment.unapplied', {
        status: 'cancelled',
        payment_id: 'pay_1',
        amount_sats: 1000,
        payment_method: 'lightning',
        reason: 'The subscription was cancelled',
      }),
    ).text;
    expect(text).toContain('Subscription: sub_1 (cancelled)\n');
    expect(text).toContain('Payment: pay_1 (paid, not applied)');
    expect(text).not.toContain('pay_1 (cancelled)');
    expect(ownerMessage(ev('payment.failed', { status: 'failed', payment_id: 'pay_2' })).text).toContain('Subscription: sub_1\nPayment: pay_2 (failed)');
  });

  it('a free trial that ended unpaid without grace says so when access ends (found from outside)', () => {
    const trial = subscriberMessage(ev('subscription.payment_failed', { amount_sats: 1000, pay_by: 1_700_086_400, after_trial: true }), {});
    expect(trial.text).toContain('The renewal of Gold (1,000 sats) was not paid by the end of your free trial, so your access has ended for now.');
    const period = subscriberMessage(ev('subscription.payment_failed', { amount_sats: 1000, pay_by: 1_700_086_400 }), {});
    expect(period.text).toContain('The renewal of Gold (1,000 sats) is unpaid, so your access has ended for now.');
  });

  it('an expiry says what was left unpaid and links the checkout page while the plan is offered (found from outside)', () => {
    const who = { manageUrl: 'http://x/manage?token=t', checkoutUrl: 'http://x/subscriptions_manager/checkout/plan_1' };
    const expired = (reason: string, reader: Parameters<typeof subscriberMessage>[1] = who) =>
      subscriberMessage(ev('subscription.expired', { status: 'expired', reason, amount_sats: 800 }), reader);
    const dunning = expired('renewal unpaid at the end of the dunning window');
    expect(dunning.text).toContain('Your subscription to Gold has expired: its renewal was not paid in time.');
    expect(dunning.text).toContain('To subscribe again: http://x/subscriptions_manager/checkout/plan_1');
    expect(dunning.html).toContain('<a href="http://x/subscriptions_manager/checkout/plan_1">');
    expect(expired('renewal unpaid for 24 hours after the subscription was resumed').text).toContain(
      'has expired: it was resumed, but the payment that starts its new period was not made within a day.',
    );
    expect(expired('checkout unpaid for 24 hours').text).toContain('has expired: its first payment was not made, so it never started. Nothing was charged.');
    // The plan no longer offered: no checkout to send them to.
    const gone = expired('renewal unpaid at the end of the dunning window', { ...who, checkoutUrl: null });
    expect(gone.text).toContain('The merchant no longer offers this plan.');
    expect(gone.text).not.toContain('subscribe again');
  });

  it('an NWC trial start says the connected wallet pays automatically after it (found from outside)', () => {
    const nwc = subscriberMessage(ev('subscription.created', { trial: true, amount_sats: 5000, interval: 'monthly', payment_method: 'nwc' }), {});
    expect(nwc.text).toContain('After it, your connected wallet pays 5,000 sats per month automatically; we will remind you before it ends.');
    const invoice = subscriberMessage(ev('subscription.created', { trial: true, amount_sats: 5000, interval: 'monthly', payment_method: 'lightning' }), {});
    expect(invoice.text).toContain('After it, the subscription costs 5,000 sats per month; we will remind you before it ends.');
  });

  it("owner notices have a title for every event, and put a payment's status beside the payment", () => {
    for (const event of EventName.options) expect(ownerMessage(ev(event, { status: 'x' })).subject, event).not.toContain(event);
    const paid = ownerMessage(ev('payment.received', { payment_id: 'pay_1', status: 'paid', amount_sats: 1000 })).text;
    expect(paid).toContain('Subscription: sub_1\n');
    expect(paid).toContain('Payment: pay_1 (paid)');
    const extended = ownerMessage(ev('subscription.extended', { status: 'active', days: 10, current_period_end: 1_700_086_400 })).text;
    expect(extended).toContain('Extended by: 10 days');
    expect(extended).toContain('Period ends: 2023-11-15 22:13 UTC');
    // behaviour.md: expiry after dunning and a deactivated wallet notify the subscriber, whatever the owner chose.
    for (const event of ['subscription.expired', 'nwc.wallet_disabled'] as const) {
      expect(subscriberWants(ev(event, { notify_subscriber: true }), []), event).toBe(true);
      // A checkout that lapsed unpaid concerns nobody but the owner.
      expect(subscriberWants(ev(event, { notify_subscriber: false }), all), event).toBe(false);
    }
    expect(ownerMessage(ev('subscription.cancelled', { status: 'cancelled', cancel_reason: 'chargeback fraud suspect' })).text).toContain(
      'Cancel reason: chargeback fraud suspect',
    );
  });
});

describe('notification settings', () => {
  const o = {
    serverMail: true,
    newKey: () => 'ab'.repeat(32),
    toSecretHex: (v: string) => (/^[0-9a-f]{64}$/.test(v) ? v : undefined),
    toPubkeyHex: (v: string) => v,
    publicKeyOf: (h: string) => `npub-of-${h.slice(0, 4)}`,
  };
  const base = { owner_events: [], subscriber_events: [...SubscriberNotice.options] };

  it('keeps stored secrets when a PUT leaves them out; generates a Nostr key when none exists; refuses a channel without its secret', () => {
    const first = mergeSettings(
      { ...base, channels: { messenger: { bot_token: '1:' + 'a'.repeat(30) }, nostr: { relays: ['wss://r.example'], nip04: false } } },
      {},
      {},
      o,
    );
    expect(first.secrets).toEqual({ bot_token: '1:' + 'a'.repeat(30), nostr_key: 'ab'.repeat(32) });
    expect(first.generated).toBe('ab'.repeat(32));
    const again = mergeSettings(
      { ...base, channels: { messenger: {}, nostr: { relays: ['wss://r.example'], nip04: true } } },
      first.secrets,
      {},
      { ...o, newKey: () => 'cd'.repeat(32) },
    );
    expect(again.secrets).toEqual(first.secrets);
    expect(again.generated).toBeUndefined();
    expect(() => mergeSettings({ ...base, channels: { messenger: {} } }, {}, {}, o)).toThrow(SettingsError);
    expect(() => mergeSettings({ ...base, channels: { email: {} } }, {}, {}, { ...o, serverMail: false })).toThrow(/smtp_url/);
    const view = viewSettings(again.settings, 5);
    expect(JSON.stringify(view)).not.toContain('a'.repeat(30));
    expect(view.channels.messenger).toEqual({ bot_token: 'configured', owner_chat_id: null });
    // Notices always sent are accepted in a list (earlier versions offered them) but neither kept nor shown.
    // Kept in the stored list (a replica of an earlier version reads them there), never shown.
    expect(first.settings.subscriber_events).toEqual(expect.arrayContaining(['subscription.expired', 'nwc.wallet_disabled', ...SWITCHABLE_NOTICES]));
    expect(viewSettings(first.settings, 5).subscriber_events).toEqual([...SWITCHABLE_NOTICES]);
    expect(SWITCHABLE_NOTICES).not.toContain('subscription.expired');
    expect(SWITCHABLE_NOTICES).not.toContain('nwc.wallet_disabled');
    expect(viewSettings({ ...again.settings, subscriber_events: ['subscription.expired', 'renewal.reminder'] }, 5).subscriber_events).toEqual([
      'renewal.reminder',
    ]);
  });

  it('subscribers are reached on their preferred channel when the plan has it, else on every contact a channel covers', () => {
    const s = mergeSettings({ ...base, channels: { email: {}, messenger: { bot_token: '1:' + 'a'.repeat(30) } } }, {}, {}, o).settings;
    const c = { email: 'a@example.com', messenger: '42', nostr: 'npub1x', contact_preference: null };
    expect(subscriberTargets(s, c)).toEqual([
      { channel: 'email', to: 'a@example.com' },
      { channel: 'messenger', to: '42' },
    ]);
    expect(subscriberTargets(s, { ...c, contact_preference: 'messenger' })).toEqual([{ channel: 'messenger', to: '42' }]);
    // Preferred Nostr, but the plan has no Nostr channel: every contact it covers.
    expect(subscriberTargets(s, { ...c, contact_preference: 'nostr' })).toHaveLength(2);
    expect(contactMethods(s)).toEqual(['email', 'messenger']);
  });
});

describe('notice routes (the share of the notice worker each gets)', () => {
  it("an owner's own mail server and relays are the wallet's; the server's mail server and the Bot API are one route for all (found in review)", () => {
    const server = defaultSettings(true);
    const own = { ...server, channels: { ...server.channels, email: { own_smtp: true, from: null, owner_email: null } } };
    expect(noticeRoute('wal_a', 'email', server)).toBe('email');
    expect(noticeRoute('wal_b', 'email', server)).toBe('email');
    expect(noticeRoute('wal_a', 'email', own)).toBe('email:wal_a');
    expect(noticeRoute('wal_a', 'messenger', own)).toBe('messenger');
    expect(noticeRoute('wal_a', 'nostr', own)).toBe('nostr:wal_a');
  });
});

describe('channel addressing', () => {
  it('a NIP-05 domain on a private address is refused without a request, as for webhooks; a malformed contact is permanent', async () => {
    let asked = 0;
    const server = createServer((_req, res) => {
      asked++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ names: { bob: 'ab'.repeat(32) } }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const o = { policy: { allowPrivate: false }, timeoutMs: 2000, nip05Http: true };
      const sender = { secretHex: '11'.repeat(32), relays: ['ws://127.0.0.1:9'], nip04: false };
      const refused = await sendNostr(sender, `bob@${host}`, 'hi', o);
      expect(refused).toMatchObject({ delivered: false, permanent: true, error: expect.stringMatching(/not allowed.*127\.0\.0\.1/) });
      expect(asked).toBe(0);
      expect(await resolveRecipient(`bob@${host}`, { ...o, policy: { allowPrivate: true } })).toEqual({ pubkey: 'ab'.repeat(32), relays: [] });
      expect(asked).toBe(1);
      await expect(resolveRecipient(`carl@${host}`, { ...o, policy: { allowPrivate: true } })).rejects.toThrow(/knows no Nostr key for carl/);
      expect(await sendNostr(sender, 'npub1nope', 'hi', o)).toMatchObject({ delivered: false, permanent: true });
      // Every configured relay refused by the policy: the reason says that, not "none configured".
      expect(await sendNostr(sender, 'ab'.repeat(32), 'hi', o)).toMatchObject({
        delivered: false,
        permanent: true,
        error: 'no relay to publish to: the configured relays are not allowed (ws://127.0.0.1:9: private, local or malformed)',
      });
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });

  it('messenger chat ids: numbers stay numbers, names become @names', () => {
    expect(chatIdOf('123456789')).toBe(123456789);
    expect(chatIdOf('-1001234567890')).toBe(-1001234567890);
    expect(chatIdOf('@shop_channel')).toBe('@shop_channel');
    expect(chatIdOf('alice')).toBe('@alice');
  });
});

describe("owners' mail servers and relays", () => {
  const dns = async (host: string) => (host === 'mail.example.com' ? ['93.184.216.34'] : host === 'inside.example.com' ? ['10.0.0.5'] : []);
  const body = (smtp: string, relays: string[]) => ({
    channels: { email: { smtp_url: smtp }, nostr: { relays, nip04: false } },
    owner_events: [],
    subscriber_events: [],
  });

  it('must be public addresses, as webhook URLs, unless private ones are allowed; the password is never in the sentence', async () => {
    const off = { allowPrivate: false };
    expect(await refusedAddresses(body('smtp://u:pw-123@mail.example.com:587', ['wss://8.8.8.8']), off, dns)).toEqual([]);
    const refused = await refusedAddresses(body('smtps://u:pw-123@inside.example.com:465', ['ws://127.0.0.1:7000', 'wss://8.8.8.8']), off, dns);
    expect(refused.map(([loc]) => loc)).toEqual([
      ['channels', 'email', 'smtp_url'],
      ['channels', 'nostr', 'relays', 0],
    ]);
    expect(refused[0]![1]).toMatch(/10\.0\.0\.5/);
    expect(JSON.stringify(refused)).not.toContain('pw-123');
    expect(await refusedAddresses(body('smtp://u:pw@127.0.0.1:25', ['ws://127.0.0.1:7000']), { allowPrivate: true }, dns)).toEqual([]);
    const sent = await sendEmail('smtp://u:pw-123@127.0.0.1:9', { from: 'a@example.com' }, 'b@example.com', { subject: 's', text: 't', html: '<p>t</p>' }, off);
    expect(sent).toMatchObject({ delivered: false, permanent: true, error: expect.stringMatching(/^mail server not allowed/) });
  });
});

describe('mail transport and sender', () => {
  it("a failure to reach the deployment's server names neither its host nor its port; the owner's own server is named (found from outside)", async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const m = { subject: 's', text: 't', html: '<p>t</p>' };
    const logged: string[] = [];
    const service = await sendEmail(`smtp://127.0.0.1:${port}`, { from: 'a@example.com' }, 'b@example.com', m, undefined, (d) => logged.push(d));
    expect(service).toMatchObject({ delivered: false, permanent: false });
    expect(service.error).toMatch(/^the service's mail server could not be reached/);
    expect(service.error).not.toContain(String(port));
    expect(service.error).not.toContain('127.0.0.1');
    expect(logged.join(' ')).toContain(`127.0.0.1:${port}`);
    const own = await sendEmail(`smtp://127.0.0.1:${port}`, { from: 'a@example.com' }, 'b@example.com', m, { allowPrivate: true });
    expect(own).toMatchObject({ delivered: false, permanent: false, error: expect.stringContaining(`127.0.0.1:${port}`) });
  });

  it('the transport is the URL host, port and login only: query options never reach it', () => {
    expect(smtpOptions('smtps://me%40shop:p%3Fss%2Fw@mail.example.com')).toMatchObject({
      host: 'mail.example.com',
      port: 465,
      secure: true,
      auth: { user: 'me@shop', pass: 'p?ss/w' },
    });
    const opts = smtpOptions('smtp://mail.example.com:2525/?sendmail=true&path=/bin/cp&logger=true&proxy=http://10.0.0.1:3128') as Record<string, unknown>;
    expect(opts).toMatchObject({ host: 'mail.example.com', port: 2525, secure: false });
    for (const k of ['sendmail', 'path', 'logger', 'debug', 'proxy', 'url', 'auth']) expect(opts).not.toHaveProperty(k);
    expect(() => smtpOptions('http://mail.example.com')).toThrow();
  });

  it('a login goes to another machine only over TLS: STARTTLS required for smtp:// with a login, except on loopback', () => {
    expect(smtpOptions('smtp://me:pw@mail.example.com')).toMatchObject({ port: 587, secure: false, requireTLS: true });
    expect(smtpOptions('smtp://me:pw@[2001:db8::1]:25')).toMatchObject({ host: '2001:db8::1', requireTLS: true });
    expect(smtpOptions('smtps://me:pw@mail.example.com')).not.toHaveProperty('requireTLS');
    for (const url of ['smtp://relay.mail.svc:25', 'smtp://me:pw@127.0.0.1:2525', 'smtp://me:pw@localhost:2525', 'smtp://me:pw@[::1]:2525'])
      expect(smtpOptions(url), url).not.toHaveProperty('requireTLS');
  });

  it.skipIf(!nonLoopback())('a server on another machine that offers no STARTTLS gets no login in clear: the send fails and says why', async () => {
    const server = await startSmtpServer('tls-user', 'tls-pass', { host: '0.0.0.0' });
    try {
      const m = { subject: 's', text: 't', html: '<p>t</p>' };
      const port = new URL(server.url).port;
      const away = await sendEmail(`smtp://tls-user:tls-pass@${nonLoopback()}:${port}`, { from: 'a@example.com' }, 'b@example.com', m, { allowPrivate: true });
      expect(away).toMatchObject({ delivered: false, permanent: true });
      expect(away.error).toMatch(/^the mail server did not take STARTTLS, which a login sent to another machine requires/);
      expect(server.mails).toHaveLength(0);
      // The operator's own server (SMTP_URL): theirs to fix, told in their log; the mail is tried again.
      const logged: string[] = [];
      const service = await sendEmail(`smtp://tls-user:tls-pass@${nonLoopback()}:${port}`, { from: 'a@example.com' }, 'b@example.com', m, undefined, (detail) =>
        logged.push(detail),
      );
      expect(service).toMatchObject({ delivered: false, permanent: false, error: "the service's mail server did not take STARTTLS, which its login requires" });
      expect(logged.join(' ')).toMatch(/STARTTLS/);
      // The same server on loopback takes it.
      const here = await sendEmail(`smtp://tls-user:tls-pass@127.0.0.1:${port}`, { from: 'a@example.com' }, 'b@example.com', m, { allowPrivate: true });
      expect(here).toMatchObject({ delivered: true });
      expect(server.mails).toHaveLength(1);
    } finally {
      await server.stop();
    }
  });

  it("through the server's mail server the From is MAIL_FROM's address; the owner's name and address go in the name and Reply-To", () => {
    const server = 'Billing <billing@example.com>';
    expect(senderFor(server, 'Shop <ceo@bank.example>', null, false)).toEqual({
      from: { name: 'Shop', address: 'billing@example.com' },
      replyTo: 'ceo@bank.example',
    });
    expect(senderFor(server, 'ceo@bank.example', 'Satoshi Shop', false)).toEqual({
      from: { name: 'Satoshi Shop', address: 'billing@example.com' },
      replyTo: 'ceo@bank.example',
    });
    expect(senderFor(server, null, null, false)).toEqual({ from: { name: 'Billing', address: 'billing@example.com' } });
    expect(senderFor(server, 'Shop <ceo@bank.example>', null, true)).toEqual({ from: 'Shop <ceo@bank.example>' });
    expect(senderFor(server, null, null, true)).toEqual({ from: server });
  });
});
