import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AddressInfo, createServer as createNetServer, type Socket } from 'node:net';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finalizeEvent, generateSecretKey, getPublicKey, type Event } from 'nostr-tools/pure';
import * as nip04 from 'nostr-tools/nip04';
import * as nip17 from 'nostr-tools/nip17';
import * as nip19 from 'nostr-tools/nip19';
import { SimplePool, useWebSocketImplementation } from 'nostr-tools/pool';
import { SecretBox } from '@sb/runtime';
import { createWallet, freePort } from '../scripts/stack.mjs';
import { devClock } from './support/clock.js';
import { client, until } from './support/http.js';
import { startNostrRelay, type NostrRelay } from './support/nostr-relay.js';
import { startSmtpServer } from './support/smtp-server.js';
import { startStack, type Stack } from './support/stack.js';
import { startTelegramServer, type TelegramServer } from './support/telegram-server.js';

useWebSocketImplementation(WebSocket);

/**
 * Notifications on every channel through the whole system, each against a local server of its real
 * protocol: e-mail to SMTP servers (the deployment's and the owner's own), the messenger to a Telegram Bot
 * API server, Nostr direct messages to NIP-01 relays, read back and decrypted as a Nostr client would
 * (NIP-59 gift wrap, NIP-44 seal, kind 14 rumor; NIP-04 for the legacy option), NIP-05 resolved from a
 * /.well-known/nostr.json server, and kind 10050 DM relays honoured.
 */

const TOKEN = '7001:AAH-test-bot-token-secret-0123456789';
const TOKEN2 = '7002:AAH-second-bot-token-secret-98765432';
const OWNER_SMTP_PASS = 'owner-smtp-pass-53cr3t';

let stack: Stack;
let tg: TelegramServer;
let relay: NostrRelay;
let dmRelay: NostrRelay;
let serverSmtp: Awaited<ReturnType<typeof startSmtpServer>>;
let ownSmtp: Awaited<ReturnType<typeof startSmtpServer>>;
let nip05: Server;
let nip05Host: string;
const ownerSk = generateSecretKey();
const carolSk = generateSecretKey();
const bobSk = generateSecretKey();
let generatedNsec: string;

beforeAll(async () => {
  [serverSmtp, ownSmtp, tg, relay, dmRelay] = await Promise.all([
    startSmtpServer('mailer', 'mail-pass'),
    startSmtpServer('owner', OWNER_SMTP_PASS, { rejectRcpt: (a) => a.startsWith('nobody@') }),
    startTelegramServer([TOKEN, TOKEN2]),
    startNostrRelay(),
    startNostrRelay(),
  ]);
  nip05 = createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    const names: Record<string, string> = u.pathname === '/.well-known/nostr.json' && u.searchParams.get('name') === 'bob' ? { bob: getPublicKey(bobSk) } : {};
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ names }));
  });
  await new Promise<void>((r) => nip05.listen(0, '127.0.0.1', r));
  nip05Host = `127.0.0.1:${(nip05.address() as AddressInfo).port}`;
  // Bob reads his direct messages on another relay, and says so in his kind 10050 list on the configured one.
  const pool = new SimplePool();
  await Promise.any(
    pool.publish([relay.url], finalizeEvent({ kind: 10050, created_at: Math.floor(Date.now() / 1000), tags: [['relay', dmRelay.url]], content: '' }, bobSk)),
  );
  pool.destroy();
  stack = await startStack({
    wallets: 2,
    env: {
      WEBHOOK_ALLOW_PRIVATE: '1',
      SMTP_URL: serverSmtp.url,
      MAIL_FROM: 'Billing <billing@example.com>',
      NOTIFIER_POLL_INTERVAL_MS: '150',
      MESSENGER_API_URL: tg.url,
      MESSENGER_POLL_MS: '300',
      NIP05_ALLOW_HTTP: '1',
      NOTIFY_TIMEOUT_MS: '3000',
    },
  });
});
afterAll(async () => {
  await stack?.stop();
  await Promise.allSettled([
    tg?.stop(),
    relay?.stop(),
    dmRelay?.stop(),
    serverSmtp?.stop(),
    ownSmtp?.stop(),
    new Promise<void>((r) => (nip05 ? nip05.close(() => r()) : r())),
  ]);
});

const admin = (w = 0) => client(stack.api, stack.wallets[w]!.admin_key);
const reader = () => client(stack.api, stack.wallets[0]!.invoice_key);
const pub = () => client(stack.api);
const rows = async (sql: string, params: unknown[] = []) => (await stack.db.query(sql, params)).rows;
const advance = async (seconds: number) => expect((await admin().post('/dev/clock', { advance_seconds: seconds })).status).toBe(200);
const settle = (ms = 1200) => new Promise((r) => setTimeout(r, ms));

/** The direct messages a Nostr client with this key reads on a relay: gift wraps unwrapped, NIP-04 decrypted. */
function dms(r: NostrRelay, sk: Uint8Array): { from: string; text: string; kind: number }[] {
  const pk = getPublicKey(sk);
  const out: { from: string; text: string; kind: number }[] = [];
  for (const e of r.received as Event[]) {
    if (!e.tags.some((t) => t[0] === 'p' && t[1] === pk)) continue;
    if (e.kind === 1059) {
      const rumor = nip17.unwrapEvent(e, sk);
      expect(rumor.kind).toBe(14);
      expect(rumor.tags).toContainEqual(['p', pk]);
      // The wrap is signed by a one-time key, never the sender's.
      expect(e.pubkey).not.toBe(rumor.pubkey);
      out.push({ from: rumor.pubkey, text: rumor.content, kind: 1059 });
    } else if (e.kind === 4) {
      out.push({ from: e.pubkey, text: nip04.decrypt(sk, e.pubkey, e.content), kind: 4 });
    }
  }
  return out;
}
const tgTo = (chat: string) => tg.sent.filter((m) => String(m.chat_id) === chat);
const mailsTo = (to: string) => [...serverSmtp.mails, ...ownSmtp.mails].filter((m) => m.to.includes(to));

const OWNER_EVENTS = [
  'subscription.created',
  'subscription.cancelled',
  'payment.received',
  'payment.failed',
  'subscription.payment_failed',
  'subscription.expired',
  'nwc.wallet_disabled',
  'payment.unapplied',
];
const walletSettings = () => ({
  channels: {
    email: { smtp_url: ownSmtp.url, from: 'Shop <shop@example.com>', owner_email: 'owner@example.com' },
    messenger: { bot_token: TOKEN, owner_chat_id: '1001' },
    nostr: { generate_key: true, relays: [relay.url], owner_pubkey: nip19.npubEncode(getPublicKey(ownerSk)) },
  },
  owner_events: OWNER_EVENTS,
  merchant_name: 'Satoshi Shop',
});

describe('notification settings', () => {
  it('defaults, validation, secrets sealed and shown as configured, a generated Nostr key shown once', async () => {
    const initial = await reader().get('/notification-settings');
    expect(initial.status).toBe(200);
    expect(initial.body).toMatchObject({
      channels: { email: { smtp_url: null, from: null, owner_email: null }, messenger: null, nostr: null },
      owner_events: [],
      updated_at: null,
      merchant_name: null,
    });
    expect(initial.body.subscriber_events).toContain('renewal.reminder');

    expect((await reader().put('/notification-settings', walletSettings())).status).toBe(403);
    const bad = async (body: unknown, loc: unknown[]) => {
      const res = await admin().put('/notification-settings', body);
      expect(res.status, JSON.stringify(res.body)).toBe(422);
      expect(res.body.detail[0].loc).toEqual(loc);
    };
    await bad({ channels: { messenger: { owner_chat_id: '1001' } } }, ['body', 'channels', 'messenger', 'bot_token']);
    await bad({ channels: { messenger: { bot_token: 'nope' } } }, ['body', 'channels', 'messenger', 'bot_token']);
    await bad({ channels: { nostr: { relays: ['http://relay.example'] } } }, ['body', 'channels', 'nostr', 'relays', 0]);
    await bad({ channels: { nostr: { relays: [relay.url], generate_key: true, private_key: 'ab'.repeat(32) } } }, ['body', 'channels', 'nostr']);
    await bad({ channels: {}, owner_events: ['no.such_event'] }, ['body', 'owner_events', 0]);
    // A sender is one mailbox on one line: a line break would be a header of its own (Bcc: anyone).
    for (const from of ['x\r\nBcc: evil@example.com', 'Shop <shop@example.com>\r\nBcc: evil@example.com', '<<<>>>', 'a@b.c, c@d.e']) {
      await bad({ channels: { email: { from } } }, ['body', 'channels', 'email', 'from']);
    }
    await bad({ channels: {}, merchant_name: 'Shop\r\nBcc: x@evil.com' }, ['body', 'merchant_name']);
    // 64 hex that is no secp256k1 key: the secret out of range, the public key not on the curve.
    for (const key of ['f'.repeat(64), '0'.repeat(64)]) {
      await bad({ channels: { nostr: { relays: [relay.url], private_key: key } } }, ['body', 'channels', 'nostr', 'private_key']);
    }
    await bad({ channels: { nostr: { relays: [relay.url], owner_pubkey: '0'.repeat(64) } } }, ['body', 'channels', 'nostr', 'owner_pubkey']);
    await bad({ channels: { nostr: { relays: [relay.url], owner_pubkey: nip19.npubEncode('0'.repeat(64)) } } }, ['body', 'channels', 'nostr', 'owner_pubkey']);
    // A mail server URL is a host, port and login: query options would reach the mail library as transport options.
    for (const q of ['?sendmail=true&path=/bin/cp', '?logger=true&debug=true', '/?proxy=http://10.0.0.1:3128', '/some/path', '#x']) {
      await bad({ channels: { email: { smtp_url: `${ownSmtp.url}${q}` } } }, ['body', 'channels', 'email', 'smtp_url']);
    }
    // The login is sent decoded: an escape that does not decode would fail every message (found from outside: saved).
    const host = new URL(ownSmtp.url).host;
    for (const login of ['u%ZZ:pw', 'user:pw%', 'us%e:pw']) {
      await bad({ channels: { email: { smtp_url: `smtp://${login}@${host}` } } }, ['body', 'channels', 'email', 'smtp_url']);
    }
    await bad({ channels: {}, bot_token: TOKEN }, ['body', 'bot_token']);

    const put = await admin().put('/notification-settings', walletSettings());
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body.channels).toEqual({
      email: { smtp_url: 'configured', from: 'Shop <shop@example.com>', owner_email: 'owner@example.com' },
      messenger: { bot_token: 'configured', owner_chat_id: '1001' },
      nostr: {
        private_key: 'configured',
        public_key: expect.stringMatching(/^npub1/),
        relays: [relay.url],
        owner_pubkey: expect.stringMatching(/^npub1/),
        nip04: false,
      },
    });
    generatedNsec = put.body.generated_private_key;
    expect(generatedNsec).toMatch(/^nsec1/);
    const generatedHex = Buffer.from(nip19.decode(generatedNsec).data as Uint8Array).toString('hex');
    expect(nip19.npubEncode(getPublicKey(Buffer.from(generatedHex, 'hex')))).toBe(put.body.channels.nostr.public_key);
    expect(JSON.stringify(put.body)).not.toContain(TOKEN.split(':')[1]);
    expect(JSON.stringify(put.body)).not.toContain(OWNER_SMTP_PASS);

    const got = await reader().get('/notification-settings');
    expect(got.body).not.toHaveProperty('generated_private_key');
    const { generated_private_key: _g, ...shown } = put.body;
    expect(got.body).toEqual(shown);

    // Secrets left out are kept: the key is not regenerated, the token still works (test send below).
    const again = await admin().put('/notification-settings', {
      ...walletSettings(),
      channels: {
        email: { from: 'Shop <shop@example.com>', owner_email: 'owner@example.com' },
        messenger: { owner_chat_id: '1001' },
        nostr: { relays: [relay.url], owner_pubkey: walletSettings().channels.nostr.owner_pubkey },
      },
    });
    expect(again.status).toBe(200);
    expect(again.body).not.toHaveProperty('generated_private_key');
    expect(again.body.channels).toEqual(put.body.channels);

    const [stored] = await rows(`SELECT config::text AS config, secrets_sealed FROM notifier.settings WHERE wallet_id = $1 AND plan_id = ''`, [
      stack.wallets[0]!.id,
    ]);
    for (const secret of [TOKEN.split(':')[1]!, OWNER_SMTP_PASS, generatedHex]) {
      expect(stored.config).not.toContain(secret);
      expect(stored.secrets_sealed).not.toContain(secret);
    }
    expect(JSON.parse(new SecretBox(stack.env.SECRETS_KEY!).open(stored.secrets_sealed))).toEqual({
      smtp_url: ownSmtp.url,
      bot_token: TOKEN,
      nostr_key: generatedHex,
    });
  });

  it('test sends go out for real on each channel and answer the provider error in words', async () => {
    const test = (body: unknown) => admin().post('/notification-settings/test', body);
    const email = await test({ channel: 'email' });
    expect(email.body).toEqual({ channel: 'email', to: 'owner@example.com', delivered: true, error: null });
    const mail = ownSmtp.mails.find((m) => m.to.includes('owner@example.com'))!;
    expect(mail.subject).toBe('Test notification');
    expect(mail.from).toBe('Shop <shop@example.com>');
    expect(mail.text).toContain('e-mail channel');
    expect(mail.html).toContain('<p>This is a test message');

    tg.chats.add('1001');
    expect((await test({ channel: 'messenger' })).body).toEqual({ channel: 'messenger', to: '1001', delivered: true, error: null });
    expect(tgTo('1001').map((m) => [m.token, m.text.split('\n')[0]])).toEqual([[TOKEN, 'Test notification']]);
    // An owner's @channel (owner_chat_id takes one) goes to it as it is: no Start to wait for.
    tg.chats.add('@shop_channel');
    expect((await test({ channel: 'messenger', to: '@shop_channel' })).body).toEqual({
      channel: 'messenger',
      to: '@shop_channel',
      delivered: true,
      error: null,
    });
    expect(tgTo('@shop_channel')).toHaveLength(1);

    const nostr = await test({ channel: 'nostr' });
    expect(nostr.body).toMatchObject({ channel: 'nostr', delivered: true, error: null });
    const got = dms(relay, ownerSk);
    expect(got).toHaveLength(1);
    expect(got[0]!.text).toContain('Nostr channel');
    expect(nip19.npubEncode(got[0]!.from)).toBe((await reader().get('/notification-settings')).body.channels.nostr.public_key);

    // Errors of the provider, in its words; nothing retried.
    expect((await test({ channel: 'messenger', to: '999' })).body).toEqual({
      channel: 'messenger',
      to: '999',
      delivered: false,
      error: '400 Bad Request: chat not found',
    });
    const refused = await test({ channel: 'email', to: 'nobody@example.com' });
    expect(refused.body.delivered).toBe(false);
    expect(refused.body.error).toMatch(/550.*No such user/);
    expect((await test({ channel: 'nostr', to: 'not-a-key' })).status).toBe(422);
    expect((await reader().post('/notification-settings/test', { channel: 'email' })).status).toBe(403);
    expect((await admin(1).post('/notification-settings/test', { channel: 'messenger', to: '1001' })).status).toBe(422); // wallet 1 has no messenger
  });

  it('a mail server URL stored with query options is used as host, port and login only: no program runs', async () => {
    const w1 = stack.wallets[1]!.id;
    const dir = mkdtempSync(join(tmpdir(), 'sb-sendmail-'));
    const marker = join(dir, 'ran');
    const program = join(dir, 'sendmail');
    writeFileSync(program, `#!/bin/sh\ntouch '${marker}'\ncat >/dev/null\n`, { mode: 0o755 });
    try {
      const put = await admin(1).put('/notification-settings', { channels: { email: { smtp_url: ownSmtp.url, owner_email: 'two@example.com' } } });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      // As one stored before URLs were checked: sealed with the options in its query.
      await rows(`UPDATE notifier.settings SET secrets_sealed = $2 WHERE wallet_id = $1 AND plan_id = ''`, [
        w1,
        new SecretBox(stack.env.SECRETS_KEY!).seal(JSON.stringify({ smtp_url: `${ownSmtp.url}?sendmail=true&path=${program}&logger=true&debug=true` })),
      ]);
      const sent = await admin(1).post('/notification-settings/test', { channel: 'email' });
      expect(sent.body).toEqual({ channel: 'email', to: 'two@example.com', delivered: true, error: null });
      expect(ownSmtp.mails.filter((m) => m.to.includes('two@example.com'))).toHaveLength(1);
      expect(existsSync(marker)).toBe(false);
    } finally {
      await rows(`DELETE FROM notifier.settings WHERE wallet_id = $1`, [w1]);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("through the server's mail server the From is always MAIL_FROM; the owner's gives the name and Reply-To", async () => {
    const w1 = stack.wallets[1]!.id;
    try {
      const put = await admin(1).put('/notification-settings', {
        channels: { email: { from: 'Shop Two <ceo@bank.example>', owner_email: 'two@example.com' } },
      });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      expect((await admin(1).post('/notification-settings/test', { channel: 'email' })).body.delivered).toBe(true);
      const [mail] = serverSmtp.mails.filter((m) => m.to.includes('two@example.com'));
      expect(mail).toMatchObject({ from: 'Shop Two <billing@example.com>', replyTo: 'ceo@bank.example' });

      // A bare address as from: the merchant name (else MAIL_FROM's) names the sender.
      await admin(1).put('/notification-settings', {
        channels: { email: { from: 'ceo@bank.example', owner_email: 'three@example.com' } },
        merchant_name: 'Two Shop',
      });
      expect((await admin(1).post('/notification-settings/test', { channel: 'email' })).body.delivered).toBe(true);
      expect(serverSmtp.mails.filter((m) => m.to.includes('three@example.com'))).toMatchObject([
        { from: 'Two Shop <billing@example.com>', replyTo: 'ceo@bank.example' },
      ]);
      // The server's mail server is no relay for owners (found from outside: 40 test mails to 40
      // strangers under a name of the owner's choosing): a test goes to the owner's own address only.
      const sentBefore = serverSmtp.mails.length;
      const elsewhere = await admin(1).post('/notification-settings/test', { channel: 'email', to: 'victim@example.org' });
      expect(elsewhere.status).toBe(422);
      expect(elsewhere.body.detail[0]).toMatchObject({ loc: ['body', 'to'] });
      expect((await admin(1).post('/notification-settings/test', { channel: 'email', to: 'THREE@example.com' })).body.delivered).toBe(true);
      expect(serverSmtp.mails.slice(sentBefore).map((m) => m.to)).toEqual([['THREE@example.com']]);
      // Names that read as something else are refused: a direction override, an invisible space.
      for (const name of ['Shop \u202eLAPYAP', 'Pay\u200bPal']) {
        expect((await admin(1).put('/notification-settings', { merchant_name: name })).status, name).toBe(422);
        expect((await admin(1).put('/notification-settings', { channels: { email: { from: `${name} <a@b.example>` } } })).status, name).toBe(422);
      }
      expect(ownSmtp.mails.some((m) => m.from.includes('ceo@bank.example') && m.to.some((t) => /^(two|three)@/.test(t)))).toBe(false);

      // A plan override with a key that is no secp256k1 key is 422 too.
      const plan = (await admin(1).post('/plans', { name: 'Key plan', amount_sats: 1000, interval: 'weekly' })).body;
      const badKey = await admin(1).put(`/plans/${plan.id}/notification-settings`, {
        inherit: false,
        channels: { nostr: { private_key: 'f'.repeat(64), relays: [relay.url] } },
      });
      expect(badKey.status, JSON.stringify(badKey.body)).toBe(422);
      expect(badKey.body.detail[0].loc).toEqual(['body', 'channels', 'nostr', 'private_key']);
    } finally {
      await rows(`DELETE FROM notifier.settings WHERE wallet_id = $1`, [w1]);
    }
  });

  it("a test send for a plan goes through that plan's settings: its own bot, its channels only", async () => {
    const plan = (await admin().post('/plans', { name: 'Own bot plan', amount_sats: 1000, interval: 'weekly' })).body;
    const set = await admin().put(`/plans/${plan.id}/notification-settings`, {
      inherit: false,
      channels: { messenger: { bot_token: TOKEN2, owner_chat_id: '1003' } },
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    tg.chats.add('1003');
    const sent = await admin().post('/notification-settings/test', { channel: 'messenger', plan_id: plan.id });
    expect(sent.body).toEqual({ channel: 'messenger', to: '1003', delivered: true, error: null });
    expect(tgTo('1003').map((m) => [m.token, m.text.split('\n')[0]])).toEqual([[TOKEN2, 'Test notification']]);
    // E-mail is off for this plan although the wallet has it.
    const off = await admin().post('/notification-settings/test', { channel: 'email', plan_id: plan.id });
    expect(off.status).toBe(422);
    expect(off.body.detail[0]).toMatchObject({ loc: ['body', 'channel'], msg: 'the email channel is not configured for this plan' });
    // Another wallet's plan, or none: 404, nothing sent.
    expect((await admin(1).post('/notification-settings/test', { channel: 'messenger', plan_id: plan.id })).status).toBe(404);
    expect((await admin().post('/notification-settings/test', { channel: 'messenger', plan_id: 'plan_nope' })).status).toBe(404);
    expect(tgTo('1003')).toHaveLength(1);
  });

  it("a plan's own settings without a merchant name still sign subscriber messages with the wallet's (found from outside)", async () => {
    const plan = (await admin().post('/plans', { name: 'Unsigned plan', amount_sats: 1000, interval: 'weekly', trial_days: 2 })).body;
    const set = await admin().put(`/plans/${plan.id}/notification-settings`, { inherit: false, channels: { messenger: { bot_token: TOKEN2 } } });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body.merchant_name ?? null).toBeNull();
    tg.chats.add('1005');
    const started = await pub().post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', messenger: '1005' });
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const got = await until(
      async () => tgTo('1005'),
      (m) => m.length > 0,
    );
    // The wallet's name, as the first test of this file set it.
    expect((await reader().get('/notification-settings')).body.merchant_name).toBe('Satoshi Shop');
    expect(got[0]!.text.split('\n').at(-1)).toBe('— Satoshi Shop');
  });

  it("a plan's own e-mail settings without a merchant name send as the wallet's name, not the server's (found from outside)", async () => {
    const plan = (await admin().post('/plans', { name: 'Unsigned mail', amount_sats: 1000, interval: 'weekly', trial_days: 2 })).body;
    // Its own settings, through the server's mail server (smtp_url null), with neither a from nor a name.
    const set = await admin().put(`/plans/${plan.id}/notification-settings`, { inherit: false, channels: { email: { smtp_url: null } } });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect([set.body.merchant_name ?? null, set.body.channels.email.from ?? null]).toEqual([null, null]);
    const started = await pub().post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'unsigned@example.com' });
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const got = await until(
      async () => mailsTo('unsigned@example.com'),
      (m) => m.length > 0,
    );
    expect((await reader().get('/notification-settings')).body.merchant_name).toBe('Satoshi Shop');
    // MAIL_FROM's address (the server's mail server), the wallet's name: as the message's own signature.
    expect(got[0]!.from).toBe('Satoshi Shop <billing@example.com>');
    expect(got[0]!.text.split('\n').at(-1)).toMatch(/ Satoshi Shop$/);
  });

  it('a wallet without notification settings is named by its own name in the sender and signature (found from outside)', async () => {
    const bakery = await createWallet(stack.databaseUrl, 'Corner Bakery');
    const owner = client(stack.api, bakery.admin_key);
    expect((await owner.get('/notification-settings')).body.merchant_name ?? null).toBeNull();
    const plan = (await owner.post('/plans', { name: 'Bread', amount_sats: 1000, interval: 'weekly', trial_days: 2 })).body;
    const started = await pub().post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'baker@example.com' });
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const got = await until(
      async () => mailsTo('baker@example.com'),
      (m) => m.length > 0,
    );
    // Not MAIL_FROM's name ("Billing"): the subscriber knows whose subscription this is.
    expect(got[0]!.from).toBe('Corner Bakery <billing@example.com>');
    expect(got[0]!.text.split('\n').at(-1)).toMatch(/ Corner Bakery$/);
    // The checkout page names the seller as the mail does (review finding: it named none).
    expect((await pub().get(`/public/plan/${plan.id}`)).body.merchant_name).toBe('Corner Bakery');
  });

  it('a plan inherits, overrides whole, and inherits again; the public plan offers the contact fields of its channels', async () => {
    const plan = (await admin().post('/plans', { name: 'Override plan', amount_sats: 1000, interval: 'weekly', trial_days: 2 })).body;
    const path = `/plans/${plan.id}/notification-settings`;
    const wallet = (await reader().get('/notification-settings')).body;
    const inherited = await reader().get(path);
    expect(inherited.status).toBe(200);
    expect(inherited.body).toEqual({ ...wallet, plan_id: plan.id, inherit: true });
    expect((await pub().get(`/public/plan/${plan.id}`)).body.available_contact_methods).toEqual(['email', 'messenger', 'nostr']);

    const override = await admin().put(path, {
      inherit: false,
      channels: { messenger: {} },
      owner_events: ['subscription.created'],
      subscriber_events: ['subscription.created'],
    });
    expect(override.status, JSON.stringify(override.body)).toBe(200);
    // The bot token comes from the wallet's settings; e-mail and Nostr are off for this plan.
    expect(override.body).toMatchObject({
      plan_id: plan.id,
      inherit: false,
      channels: { email: null, messenger: { bot_token: 'configured', owner_chat_id: null }, nostr: null },
      owner_events: ['subscription.created'],
    });
    expect((await reader().get(path)).body).toMatchObject({ inherit: false, channels: { email: null, nostr: null } });
    expect((await pub().get(`/public/plan/${plan.id}`)).body.available_contact_methods).toEqual(['messenger']);
    // The wallet's own settings are untouched.
    expect((await reader().get('/notification-settings')).body).toEqual(wallet);

    const back = await admin().put(path, { inherit: true });
    expect(back.status).toBe(200);
    expect(back.body).toEqual({ ...wallet, plan_id: plan.id, inherit: true });
    expect((await pub().get(`/public/plan/${plan.id}`)).body.available_contact_methods).toEqual(['email', 'messenger', 'nostr']);

    expect((await client(stack.api, stack.wallets[1]!.invoice_key).get(path)).status).toBe(404);
    expect((await admin(1).put(path, { inherit: true })).status).toBe(404);
    expect((await reader().get('/plans/plan_nope/notification-settings')).status).toBe(404);
    // A wrong override names its field, not an opaque union error.
    for (const [body, loc] of [
      [{ inherit: false }, ['body', 'channels']],
      [{ inherit: false, channels: { email: { smtp_url: 'smtp://h?sendmail=true' } } }, ['body', 'channels', 'email', 'smtp_url']],
      [{ inherit: false, channels: {}, owner_events: ['no.such_event'] }, ['body', 'owner_events', 0]],
      [{ channels: {} }, ['body', 'inherit']],
    ] as const) {
      const r = await admin().put(path, body);
      expect(r.status, JSON.stringify(body)).toBe(422);
      expect(
        r.body.detail.map((i: { loc: unknown[] }) => i.loc),
        JSON.stringify(r.body),
      ).toEqual([loc]);
    }
    // Without inherit, or with another value, the words say what to send (found from outside: "Invalid discriminator value").
    for (const body of [{}, { inherit: 'yes' }]) {
      const r = await admin().put(path, body);
      expect(r.status).toBe(422);
      expect(r.body.detail).toEqual([
        {
          loc: ['body', 'inherit'],
          msg: "inherit must be true (the wallet's settings apply) or false (the settings in this body apply)",
          type: 'invalid_union',
        },
      ]);
    }
  });
});

describe('subscriber and owner notices', () => {
  let trialPlan: { id: string };
  const subs: Record<string, string> = {};
  const portals: Record<string, string> = {};
  const subscribe = async (name: string, body: Record<string, unknown>, planId = trialPlan.id) => {
    const res = await pub().post('/public/subscribe', { plan_id: planId, payment_method: 'lightning', ...body });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    subs[name] = res.body.subscription_id;
    portals[name] = res.body.manage_url;
    return res.body;
  };
  const carolNpub = nip19.npubEncode(getPublicKey(carolSk));

  it('checkout takes the contact fields and the preference; a preference without its contact is 422', async () => {
    trialPlan = (await admin().post('/plans', { name: 'Gold', amount_sats: 2100, interval: 'weekly', trial_days: 2 })).body;
    const missing = await pub().post('/public/subscribe', {
      plan_id: trialPlan.id,
      payment_method: 'lightning',
      email: 'x@example.com',
      contact_preference: 'nostr',
    });
    expect(missing.status).toBe(422);
    expect(missing.body.detail[0].loc).toEqual(['body', 'nostr']);
    // 64 hex (or an npub) that is no point on secp256k1 could never be written to.
    for (const [field, value] of [
      ['nostr', 'not-a-key'],
      ['nostr', '0'.repeat(64)],
      ['nostr', nip19.npubEncode('0'.repeat(64))],
      ['messenger', 'two words'],
    ] as const) {
      const bad = await pub().post('/public/subscribe', { plan_id: trialPlan.id, payment_method: 'lightning', [field]: value });
      expect(bad.status).toBe(422);
      expect(bad.body.detail[0].loc).toEqual(['body', field]);
    }
    // Wallet 1 has only the e-mail channel: a preference for another is refused, and nothing is stored.
    const emailOnly = (await admin(1).post('/plans', { name: 'Mail only', amount_sats: 1000, interval: 'weekly' })).body;
    expect((await pub().get(`/public/plan/${emailOnly.id}`)).body.available_contact_methods).toEqual(['email']);
    const subscribersOf1 = async () => (await rows(`SELECT count(*)::int AS n FROM billing.subscribers WHERE wallet_id = $1`, [stack.wallets[1]!.id]))[0].n;
    const before = await subscribersOf1();
    const unoffered = await pub().post('/public/subscribe', {
      plan_id: emailOnly.id,
      payment_method: 'lightning',
      email: 'x@example.com',
      messenger: '2009',
      contact_preference: 'messenger',
    });
    expect(unoffered.status, JSON.stringify(unoffered.body)).toBe(422);
    expect(unoffered.body.detail).toEqual([expect.objectContaining({ loc: ['body', 'contact_preference'], msg: expect.stringContaining('email') })]);
    expect(await subscribersOf1()).toBe(before);
    for (const chat of ['2001', '2002', '2003']) tg.chats.add(chat);
    await subscribe('messenger', { messenger: '2001', name: 'Mia' });
    await subscribe('npub', { nostr: carolNpub });
    await subscribe('nip05', { nostr: `bob@${nip05Host}` });
    await subscribe('email', { email: 'erin@example.com' });
    await subscribe('prefers', { email: 'pat@example.com', messenger: '2002', contact_preference: 'messenger' });
    await subscribe('optout', { messenger: '2003', receive_confirmations: false, receive_reminders: false });
    const [pref] = await rows(`SELECT s.contact_preference FROM billing.subscribers s JOIN billing.subscriptions x ON x.subscriber_id = s.id WHERE x.id = $1`, [
      subs.prefers,
    ]);
    expect(pref.contact_preference).toBe('messenger');
  });

  it('the trial start reaches each subscriber once on the channel their contact gives, with the portal link', async () => {
    const started = 'Your free trial of Gold has started';
    const m = await until(
      async () => tgTo('2001'),
      (x) => x.length >= 1,
    );
    expect(m).toHaveLength(1);
    expect(m[0]!.token).toBe(TOKEN);
    expect(m[0]!.text).toContain(started);
    expect(m[0]!.text).toContain('Hello Mia,');
    expect(m[0]!.text).toMatch(/— Satoshi Shop$/);
    expect(m[0]!.text).toMatch(/\/subscriptions_manager\/manage\?token=[0-9a-f]{64}\nYou also choose there which notices you get\./);
    // The one-click link is for e-mail (with its header); a chat points to the portal only.
    expect(m[0]!.text).not.toContain('Stop these');

    const carol = await until(
      async () => dms(relay, carolSk),
      (x) => x.length >= 1,
    );
    expect(carol).toHaveLength(1);
    expect(carol[0]!.text).toContain(started);
    expect(carol[0]!.text).toMatch(/manage\?token=/);

    // Bob (NIP-05) is written to on his DM relay from his kind 10050 list, not on the configured one.
    const bob = await until(
      async () => dms(dmRelay, bobSk),
      (x) => x.length >= 1,
    );
    expect(bob).toHaveLength(1);
    expect(bob[0]!.text).toContain(started);
    expect(dms(relay, bobSk)).toEqual([]);

    const erin = await until(
      async () => mailsTo('erin@example.com'),
      (x) => x.length >= 1,
    );
    expect(erin.map((x) => [x.subject, x.from])).toEqual([[started, 'Shop <shop@example.com>']]);
    expect(erin[0]!.html).toMatch(/<a href="http:\/\/[^"]+manage\?token=/);

    // Pat prefers the messenger: nothing by e-mail. The opted-out subscriber gets no confirmation.
    expect(
      (
        await until(
          async () => tgTo('2002'),
          (x) => x.length >= 1,
        )
      )[0]!.text,
    ).toContain(started);
    await settle();
    expect(mailsTo('pat@example.com')).toEqual([]);
    expect(tgTo('2003')).toEqual([]);
  });

  it('owner notices of the chosen events arrive on each owner channel; others do not', async () => {
    const ownerDms = () => dms(relay, ownerSk).filter((x) => x.text.startsWith('New subscription'));
    await until(
      async () => ownerDms(),
      (x) => x.length >= 6,
    );
    expect(ownerDms()).toHaveLength(6);
    const tgOwner = await until(
      async () => tgTo('1001').filter((x) => x.text.startsWith('New subscription')),
      (x) => x.length >= 6,
    );
    expect(tgOwner).toHaveLength(6);
    expect(tgOwner.some((x) => x.text.includes('Subscriber: erin@example.com'))).toBe(true);
    const mails = await until(
      async () => mailsTo('owner@example.com').filter((x) => x.subject.startsWith('New subscription')),
      (x) => x.length >= 6,
    );
    expect(mails).toHaveLength(6);
    expect(mails[0]!.subject).toBe('New subscription: Gold');
  });

  it('the end of a trial paid by invoice is one message on each channel: when it ends, what to pay, the invoice and the portal to pay in', async () => {
    await advance(86_400 + 120);
    const end = (await reader().get(`/subscriptions/${subs.messenger}`)).body.current_period_end as number;
    const utc = (t: number) => `${new Date(t * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
    const ends = `Your free trial of Gold ends on ${utc(end)}. To keep access, pay 2,100 sats.`;
    const said = (texts: string[]) => texts.some((t) => t.includes(ends));
    await until(async () => tgTo('2001').map((x) => x.text), said);
    await until(async () => dms(relay, carolSk).map((x) => x.text), said);
    await until(async () => dms(dmRelay, bobSk).map((x) => x.text), said);
    const erin = await until(
      async () => mailsTo('erin@example.com'),
      (m) => said(m.map((x) => x.text)),
    );
    await settle();
    // Found from outside: a "Payment due" and a near-identical "trial is ending" message at the same moment.
    for (const [name, texts] of [
      ['messenger', tgTo('2001').map((x) => x.text)],
      ['npub', dms(relay, carolSk).map((x) => x.text)],
      ['nip05', dms(dmRelay, bobSk).map((x) => x.text)],
      ['email', mailsTo('erin@example.com').map((x) => x.text)],
    ] as const) {
      const after = texts.filter((t) => !t.includes('has started'));
      expect(after, name).toHaveLength(1);
      expect(after[0], name).toContain(ends);
      expect(after[0], name).toMatch(/\nlightning:ln\w+\n/);
      // The pay link to the portal page, where an invoice is always payable (the one above lives a day).
      expect(after[0], name).toContain(`\nPay it in your portal, which always has a payable invoice: ${portals[name]}\n`);
      // Paid in time the period continues from the trial's end; paid after it (no grace: access ended), from the payment.
      expect(after[0], name).toContain(
        `\nRenewal period: ${utc(end)} to ${utc(end + 7 * 86_400)} if paid by ${utc(end)}; paid later, one week from the payment.\n`,
      );
    }
    const mail = erin.find((m) => m.text.includes(ends))!;
    expect(mail.subject).toBe('Your free trial of Gold is ending: payment due');
    expect(mail.html).toContain(`Pay it in your portal, which always has a payable invoice: <a href="${portals.email}">`);
    expect(tgTo('2002').filter((x) => x.text.includes(ends))).toHaveLength(1);
    expect(tgTo('2003')).toEqual([]);
    // Owners still get both events on their webhooks; reminders are not among the owner's chosen notices.
    expect(tgTo('1001').filter((x) => x.text.includes('renewal.reminder'))).toEqual([]);
  });

  it('cancellation reaches every subscriber (opted out or not) and the owner, and says who cancelled and until when', async () => {
    // The owner's note is theirs: whatever it says, these were cancelled by the merchant (found from
    // outside: "cancelled by subscriber" as a note told the subscriber they had cancelled).
    const notes: Record<string, string> = { messenger: 'cancelled by subscriber', prefers: 'plan archived' };
    for (const name of ['messenger', 'npub', 'nip05', 'email', 'prefers', 'optout']) {
      expect((await admin().post(`/subscriptions/${subs[name]}/cancel`, notes[name] ? { reason: notes[name] } : {})).status).toBe(200);
    }
    const cancelled = 'Your subscription to Gold was cancelled';
    for (const chat of ['2001', '2002', '2003']) {
      const got = await until(
        async () => tgTo(chat).filter((x) => x.text.includes(cancelled)),
        (x) => x.length >= 1,
      );
      expect(got).toHaveLength(1);
      // In their free trial: never charged, so not "charged again" (found from outside).
      expect(got[0]!.text).toContain('Your subscription to Gold was cancelled by the merchant. It was in its free trial: nothing was charged.');
      expect(got[0]!.text).toMatch(/access continues until \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
      // A cancelled subscription has no notice switches left to point to.
      expect(got[0]!.text).toMatch(/Manage your subscription:\n\S+manage\?token=\w+\n— Satoshi Shop$/);
    }
    const [event] = await rows(
      `SELECT payload->'data' AS data FROM billing.outbox WHERE payload->>'event' = 'subscription.cancelled' AND payload->'data'->>'subscription_id' = $1`,
      [subs.messenger],
    );
    expect(event.data).toMatchObject({ cancelled_by: 'merchant', cancel_reason: 'cancelled by subscriber', in_trial: true, never_paid: true });
    await until(
      async () => dms(relay, carolSk),
      (x) => x.some((y) => y.text.includes(cancelled)),
    );
    await until(
      async () => dms(dmRelay, bobSk),
      (x) => x.some((y) => y.text.includes(cancelled)),
    );
    await until(
      async () => mailsTo('erin@example.com'),
      (x) => x.some((y) => y.subject === cancelled),
    );
    const owner = await until(
      async () => tgTo('1001').filter((x) => x.text.startsWith('Subscription cancelled')),
      (x) => x.length >= 6,
    );
    expect(owner).toHaveLength(6);
    expect(owner.find((x) => x.text.includes(subs.messenger!))!.text).toContain('Cancelled by: you (API)\nCancel reason: cancelled by subscriber');
  });

  it('the log lists every message with its attempts, filtered by channel, status and subscription', async () => {
    const mine = await until(
      async () => (await reader().get(`/notifications?subscription_id=${subs.messenger}`)).body,
      (b) => b.items?.filter((n: any) => n.audience === 'subscriber' && n.status === 'delivered').length >= 3,
    );
    // The trial's end reached the subscriber in its renewal reminder, not twice.
    const toSubscriber = mine.items.filter((n: any) => n.audience === 'subscriber');
    expect(toSubscriber.map((n: any) => n.event).sort()).toEqual(['renewal.reminder', 'subscription.cancelled', 'subscription.created']);
    for (const n of toSubscriber) {
      expect(n).toMatchObject({
        channel: 'messenger',
        recipient: '2001',
        status: 'delivered',
        attempt_count: 1,
        last_error: null,
        subscription_id: subs.messenger,
        plan_id: trialPlan.id,
      });
      expect(n.attempts).toEqual([{ attempted_at: expect.any(Number), error: null, permanent: false, duration_ms: expect.any(Number) }]);
    }
    const nostr = (await reader().get('/notifications?channel=nostr&limit=200')).body;
    expect(nostr.items.length).toBeGreaterThan(0);
    expect(nostr.items.every((n: any) => n.channel === 'nostr')).toBe(true);
    expect((await reader().get('/notifications?channel=fax')).status).toBe(422);
    expect((await client(stack.api, stack.wallets[1]!.invoice_key).get(`/notifications?subscription_id=${subs.messenger}`)).body.total).toBe(0);
    // Each message once per event, recipient and channel.
    const dupes = await rows(`SELECT event_id, audience, channel, recipient, count(*) FROM notifier.notifications GROUP BY 1, 2, 3, 4 HAVING count(*) > 1`);
    expect(dupes).toEqual([]);
  });

  it('a paid activation confirms the amount and period to the subscriber; the owner hears of the payment', async () => {
    const paid = (await admin().post('/plans', { name: 'Paid', amount_sats: 1500, interval: 'monthly' })).body;
    tg.chats.add('2005');
    const co = await subscribe('paid', { messenger: '2005', name: 'Paula' }, paid.id);
    expect((await pub().post(`/dev/payments/${co.payment_id}/pay`)).status).toBe(200);
    const got = await until(
      async () => tgTo('2005').filter((x) => x.text.includes('is active')),
      (x) => x.length >= 1,
    );
    expect(got[0]!.text).toMatch(/active until \d{4}-\d\d-\d\d \d\d:\d\d UTC; you paid 1,500 sats/);
    expect(got[0]!.text).toContain(`Payment reference: ${co.payment_id}`);
    // A receipt: the period paid for, the amount, how it was paid.
    const sub = (await reader().get(`/subscriptions/${co.subscription_id}`)).body;
    const utc = (t: number) => `${new Date(t * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
    expect(got[0]!.text).toContain(`Period: ${utc(sub.current_period_start)} to ${utc(sub.current_period_end)}`);
    expect(got[0]!.text).toContain('Amount: 1,500 sats');
    expect(got[0]!.text).toContain('Paid with: Lightning');
    const owner = await until(
      async () => tgTo('1001').filter((x) => x.text.startsWith('Payment received: Paid')),
      (x) => x.length >= 1,
    );
    expect(owner[0]!.text).toContain('Amount: 1,500 sats');
    // Whom from, as the owner's other notices of a subscription say (found from outside: none; the
    // payments service that sends the event does not know the subscriber).
    expect(owner[0]!.text).toContain(`Subscription: ${co.subscription_id}\nSubscriber: Paula\n`);
  });

  it('renewal, expiry after dunning and the plan archive reach messenger-only and Nostr-only subscribers', async () => {
    const daveSk = generateSecretKey();
    const fayeSk = generateSecretKey();
    const kept = (await admin().post('/plans', { name: 'Silver', amount_sats: 1200, interval: 'weekly', grace_period_days: 1 })).body;
    const lapsed = (await admin().post('/plans', { name: 'Bronze', amount_sats: 800, interval: 'weekly', grace_period_days: 1 })).body;
    for (const chat of ['2011', '2012']) tg.chats.add(chat);
    const who = [
      ['renewMsg', { messenger: '2011' }, kept.id],
      ['renewNostr', { nostr: nip19.npubEncode(getPublicKey(daveSk)) }, kept.id],
      ['lapseMsg', { messenger: '2012' }, lapsed.id],
      ['lapseNostr', { nostr: nip19.npubEncode(getPublicKey(fayeSk)) }, lapsed.id],
    ] as const;
    for (const [name, contact, planId] of who) {
      const co = await subscribe(name, { ...contact, receive_confirmations: true }, planId);
      expect((await pub().post(`/dev/payments/${co.payment_id}/pay`)).status).toBe(200);
    }
    const status = async (name: string) => (await reader().get(`/subscriptions/${subs[name]}`)).body.status;
    for (const [name] of who)
      await until(
        () => status(name),
        (s) => s === 'active',
      );
    const chatSays = (chat: string, text: string) =>
      until(
        async () => tgTo(chat).filter((x) => x.text.includes(text)),
        (x) => x.length >= 1,
      );
    const dmSays = (sk: Uint8Array, text: string) =>
      until(
        async () => dms(relay, sk).filter((x) => x.text.includes(text)),
        (x) => x.length >= 1,
      );

    // A week on the renewals are open; Silver's two are paid, Bronze's are not.
    await advance(7 * 86_400 + 120);
    const renewalOf = (name: string) =>
      until(
        async () => await rows(`SELECT id FROM payments.payments WHERE subscription_id = $1 AND purpose = 'renewal' AND status = 'pending'`, [subs[name]]),
        (r) => r.length > 0,
      );
    for (const name of ['renewMsg', 'renewNostr']) expect((await pub().post(`/dev/payments/${(await renewalOf(name))[0].id}/pay`)).status).toBe(200);
    const renewed = 'Your subscription to Silver was renewed';
    const renewedText = (await chatSays('2011', renewed))[0]!.text;
    expect(renewedText).toMatch(/renewed until \d{4}-\d\d-\d\d \d\d:\d\d UTC; you paid 1,200 sats/);
    expect(renewedText).toMatch(/Period: \d{4}-\d\d-\d\d \d\d:\d\d UTC to \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
    expect(renewedText).toContain('Paid with: Lightning');
    expect((await dmSays(daveSk, renewed))[0]!.text).toContain('you paid 1,200 sats');

    // The owner archives Silver: both are cancelled and told why.
    expect((await admin().del(`/plans/${kept.id}`)).status).toBe(200);
    const archived = 'was cancelled by the merchant, who discontinued the plan';
    expect((await chatSays('2011', archived))[0]!.text).toMatch(/access continues until \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
    expect((await dmSays(daveSk, archived))[0]!.text).toContain('Your subscription to Silver was cancelled');

    // Bronze unpaid: past due, then failed after the grace day, then expired after the dunning window. The
    // subscribers hear of each step (with until when the renewal can still be paid) before the clock moves on.
    const overdue = 'was not paid by the end of your period';
    const failed = 'The renewal of Bronze (800 sats) is unpaid, so your access has ended';
    const expired = 'Your subscription to Bronze has expired';
    for (const [step, next, notice] of [
      [0, 'past_due', overdue],
      [86_400 + 60, 'payment_failed', failed],
      [14 * 86_400 + 60, 'expired', expired],
    ] as const) {
      if (step) await advance(step);
      for (const name of ['lapseMsg', 'lapseNostr'])
        await until(
          () => status(name),
          (s) => s === next,
        );
      expect(await chatSays('2012', notice)).toHaveLength(1);
      expect(await dmSays(fayeSk, notice)).toHaveLength(1);
    }
    const [pastDueText] = await chatSays('2012', overdue);
    expect(pastDueText!.text).toContain('Payment overdue for Bronze');
    expect(pastDueText!.text).toMatch(/Your access continues until \d{4}-\d\d-\d\d \d\d:\d\d UTC; pay it before then/);
    // Why it expired, and where to subscribe again while the plan is offered (found from outside: neither).
    const [expiredText] = await chatSays('2012', expired);
    expect(expiredText!.text).toContain('Your subscription to Bronze has expired: its renewal was not paid in time.');
    const checkout = (await pub().get(`/public/plan/${lapsed.id}`)).body.checkout_url;
    expect(checkout).toMatch(/\/subscriptions_manager\/checkout\//);
    expect(expiredText!.text).toContain(`To subscribe again: ${checkout}\n`);
    const [failedText] = await dmSays(fayeSk, failed);
    expect(failedText!.text).toMatch(/Pay it by \d{4}-\d\d-\d\d \d\d:\d\d UTC to get your access back/);
    // Each says the period the renewal pays for: the week after the one that ended, then (access ended) a
    // week from the payment (found from outside: no dates of the period).
    const lapsedSub = (await reader().get(`/subscriptions/${subs.lapseMsg}`)).body;
    const utc = (t: number) => `${new Date(t * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
    // Found from outside: paid after the notice, a period from the payment did not have the dates shown.
    // Past due, it continues from the old end only if paid before the grace ends; once failed, it starts at the payment.
    const oldEnd = lapsedSub.current_period_end as number;
    expect(pastDueText!.text).toContain(
      `\nRenewal period: ${utc(oldEnd)} to ${utc(oldEnd + 7 * 86_400)} if paid by ${utc(oldEnd + 86_400)}; paid later, one week from the payment.\n`,
    );
    expect(failedText!.text).toContain('\nRenewal period: one week, starting when you pay.\n');
    // Both with the pay link to the portal page. The week went by in one move of the clock, past the
    // renewal's lead time: past_due came before its invoice, and says that it follows (review finding).
    expect(pastDueText!.text).toMatch(/\nIts invoice follows in a separate message, and your portal will have it to pay: http\S+manage\?token=[0-9a-f]{64}\n/);
    expect(failedText!.text).toMatch(/\nPay it in your portal, which always has a payable invoice: http\S+manage\?token=[0-9a-f]{64}\n/);
    // Each on their own channel only, each notice once.
    await settle(600);
    expect(tgTo('2011').filter((x) => x.text.includes(renewed) || x.text.includes(archived))).toHaveLength(2);
    expect(dms(relay, daveSk).filter((x) => x.text.includes(renewed) || x.text.includes(archived))).toHaveLength(2);
    expect(tgTo('2012').some((x) => x.text.includes('Silver'))).toBe(false);
    expect(dms(dmRelay, daveSk)).toEqual([]);
  });
});

describe('delivery', () => {
  /**
   * A wallet's settings gone, and the messages to its owner still pending given up: their backlog would
   * go through the server's mail server (the wallet has no other now) in the tests after.
   */
  const forget = async (w: number, owner: string) => {
    await rows(`DELETE FROM notifier.settings WHERE wallet_id = $1`, [stack.wallets[w]!.id]);
    await rows(`UPDATE notifier.notifications SET status = 'failed' WHERE status = 'pending' AND recipient = $1`, [owner]);
  };
  let plan: { id: string };
  const noticeOf = async (subscriptionId: string) =>
    (
      await until(
        async () => (await reader().get(`/notifications?subscription_id=${subscriptionId}&channel=messenger`)).body.items,
        (i: any[]) => i?.some((n) => n.audience === 'subscriber' && n.attempt_count > 0),
      )
    ).find((n: any) => n.audience === 'subscriber');
  const subscribeChat = async (chat: string) => {
    const res = await pub().post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', messenger: chat });
    expect(res.status).toBe(201);
    return res.body.subscription_id as string;
  };

  it('a recipient down, then rate limited, then up: retried with backoff and retry_after, delivered once', async () => {
    plan = (await admin().post('/plans', { name: 'Delivery', amount_sats: 1000, interval: 'weekly', trial_days: 3 })).body;
    tg.chats.add('3001');
    tg.script.set('3001', [500, 429]);
    const sub = await subscribeChat('3001');
    let n = await noticeOf(sub);
    expect(n).toMatchObject({ status: 'pending', attempt_count: 1, last_error: '500 Internal Server Error' });
    expect(n.next_attempt_at - n.attempts[0].attempted_at).toBe(30);
    await advance(31);
    n = await until(
      async () => (await reader().get(`/notifications?subscription_id=${sub}&channel=messenger`)).body.items.find((x: any) => x.audience === 'subscriber'),
      (x: any) => x.attempt_count === 2,
    );
    expect(n).toMatchObject({ status: 'pending', last_error: expect.stringMatching(/^429 Too Many Requests/) });
    expect(n.next_attempt_at - n.attempts[1].attempted_at).toBe(120);
    expect(tgTo('3001')).toEqual([]);
    await advance(121);
    n = await until(
      async () => (await reader().get(`/notifications?subscription_id=${sub}&channel=messenger`)).body.items.find((x: any) => x.audience === 'subscriber'),
      (x: any) => x.status === 'delivered',
    );
    expect(n.attempts.map((a: any) => a.error)).toEqual(['500 Internal Server Error', expect.stringMatching(/^429/), null]);
    await advance(600);
    await settle();
    expect(tgTo('3001')).toHaveLength(1);
    expect(tg.calls.filter((c) => String(c.chat_id) === '3001').map((c) => c.status)).toEqual([500, 429, 200]);
  });

  it('a Telegram username is reached once it presses Start on the bot: its notice waits until then; the public plan names the bot', async () => {
    // A bot with a webhook cannot be polled: Telegram's 409 is kept on the bot and the others go on.
    tg.webhookSet.add(TOKEN2);
    // The bot's username comes from its getMe, asked by the first poll.
    const shown = await until(
      async () => (await pub().get(`/public/plan/${plan.id}`)).body,
      (b: any) => b.messenger_bot !== undefined,
    );
    expect(shown.messenger_bot).toBe('shop7001_bot');
    const sub = await subscribeChat('@Zoe_Subscriber');
    const n = await noticeOf(sub);
    expect(n).toMatchObject({ status: 'pending', recipient: '@Zoe_Subscriber', attempt_count: 1 });
    expect(n.last_error).toBe('@Zoe_Subscriber has not pressed Start on the bot yet');
    expect(n.attempts[0].permanent).toBe(false);
    // Nothing was sent to "@Zoe_Subscriber": Telegram would deliver it to a public channel of that name.
    expect(tg.calls.filter((c) => String(c.chat_id).toLowerCase() === '@zoe_subscriber')).toEqual([]);

    // Someone else writing to the bot links nobody but themselves; someone without a username is told
    // their chat id.
    tg.press(TOKEN, 4243, 'someone_else', 'hello');
    tg.press(TOKEN, 4244, null);
    tg.press(TOKEN, 4242, 'zoe_subscriber');
    const greeting = await until(
      async () => tgTo('4242'),
      (m) => m.length >= 1,
    );
    expect(greeting.map((m) => [m.token, m.text])).toEqual([[TOKEN, 'Notices about your subscriptions for @zoe_subscriber will come to this chat.']]);
    expect(tgTo('4244').map((m) => m.text)).toEqual([
      "This chat's id is 4244. Give it as your Telegram contact (or set a Telegram username and give that) to get notices about your subscriptions here.",
    ]);
    expect(
      await until(
        () => rows(`SELECT username, chat_id FROM notifier.messenger_links WHERE bot_id = 7001 ORDER BY username`),
        (r) => r.length === 2,
      ),
    ).toEqual([
      { username: 'someone_else', chat_id: 4243 },
      { username: 'zoe_subscriber', chat_id: 4242 },
    ]);
    // Only /start is answered.
    expect(tgTo('4243')).toEqual([]);

    await advance(31);
    const done = await until(
      async () => (await reader().get(`/notifications?subscription_id=${sub}&channel=messenger`)).body.items.find((x: any) => x.audience === 'subscriber'),
      (x: any) => x.status === 'delivered',
    );
    expect(done.attempt_count).toBe(2);
    const got = tgTo('4242');
    expect(got).toHaveLength(2);
    expect(got[1]!.text).toContain('Your free trial of Delivery has started');
    // The updates were confirmed: later polls ask past them, and nobody is greeted twice.
    await settle();
    const polls = tg.polls.filter((p) => p.token === TOKEN);
    expect(polls.at(-1)!.offset).toBeGreaterThan(polls[0]!.offset);
    expect(tgTo('4242')).toHaveLength(2);
    // The username passes to someone else: the next notice (the cancellation, with the portal link) does
    // not go to the chat that had it; the link is dropped and the notice waits for the name's new owner.
    tg.rename(4242, 'zoe_renamed');
    expect((await admin().post(`/subscriptions/${sub}/cancel`, {})).status).toBe(200);
    const cancelled = await until(
      async () =>
        (await reader().get(`/notifications?subscription_id=${sub}&channel=messenger`)).body.items.find(
          (x: any) => x.audience === 'subscriber' && x.event === 'subscription.cancelled' && x.attempt_count > 0,
        ),
      (x: any) => x !== undefined,
    );
    expect(cancelled).toMatchObject({
      status: 'pending',
      last_error: '@Zoe_Subscriber has not pressed Start on the bot yet',
    });
    expect(tg.calls.filter((c) => String(c.chat_id).toLowerCase() === '@zoe_subscriber')).toEqual([]);
    expect(await rows(`SELECT chat_id FROM notifier.messenger_links WHERE bot_id = 7001 AND username = 'zoe_subscriber'`)).toEqual([]);
    expect(tgTo('4242')).toHaveLength(2);

    const [bot2] = await rows(`SELECT last_error, token_hash FROM notifier.messenger_bots WHERE bot_id = 7002`);
    expect(bot2.last_error).toMatch(/^409 Conflict: can't use getUpdates method while webhook is active/);
    // What is kept of a token is its hash, never the token.
    const [bot1] = await rows(`SELECT token_hash FROM notifier.messenger_bots WHERE bot_id = 7001`);
    expect(bot1.token_hash).toBe(createHash('sha256').update(TOKEN).digest('hex'));
    tg.webhookSet.delete(TOKEN2);
  });

  it('permanent errors (bot blocked, chat not found) are not retried; the owner can retry a failed one', async () => {
    tg.chats.add('3002');
    tg.blocked.add('3002');
    const blocked = await subscribeChat('3002');
    const unknown = await subscribeChat('3003');
    const b = await noticeOf(blocked);
    expect(b).toMatchObject({ status: 'failed', attempt_count: 1, next_attempt_at: null, last_error: '403 Forbidden: bot was blocked by the user' });
    expect(b.attempts[0].permanent).toBe(true);
    expect(await noticeOf(unknown)).toMatchObject({ status: 'failed', attempt_count: 1, last_error: '400 Bad Request: chat not found' });
    await advance(3600);
    await settle();
    expect(tg.calls.filter((c) => String(c.chat_id) === '3002')).toHaveLength(1);
    expect((await reader().get(`/notifications?status=failed&channel=messenger`)).body.items.map((n: any) => n.recipient)).toEqual(
      expect.arrayContaining(['3002', '3003']),
    );

    expect((await reader().post(`/notifications/${b.id}/retry`)).status).toBe(403);
    expect((await admin(1).post(`/notifications/${b.id}/retry`)).status).toBe(404);
    tg.blocked.delete('3002');
    const retried = await admin().post(`/notifications/${b.id}/retry`);
    expect(retried.status).toBe(200);
    expect(retried.body).toMatchObject({ id: b.id, status: 'pending' });
    const done = await until(
      async () => (await reader().get(`/notifications?subscription_id=${blocked}`)).body.items.find((x: any) => x.id === b.id),
      (x: any) => x.status === 'delivered',
    );
    expect(done.attempt_count).toBe(2);
    expect(tgTo('3002')).toHaveLength(1);
    expect((await admin().post(`/notifications/${b.id}/retry`)).status).toBe(409);
  });

  it('a mail server that accepts and never greets holds up its own message only: later notices go out meanwhile (found from outside)', async () => {
    // Each connection it takes, and whether the notifier has given up on it (its 20 s SMTP timeout).
    const taken: { socket: Socket; closed: boolean }[] = [];
    const hung = createNetServer((socket) => {
      const c = { socket, closed: false };
      taken.push(c);
      socket.on('close', () => (c.closed = true));
    });
    await new Promise<void>((r) => hung.listen(0, '127.0.0.1', r));
    tg.chats.add('4001');
    const ownerTg = () => tgTo('4001').filter((m) => m.text.startsWith('New subscription'));
    try {
      const put = await admin(1).put('/notification-settings', {
        channels: {
          email: { smtp_url: `smtp://127.0.0.1:${(hung.address() as AddressInfo).port}`, owner_email: 'hung@example.com' },
          messenger: { bot_token: TOKEN, owner_chat_id: '4001' },
        },
        owner_events: ['subscription.created'],
      });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      const p = (await admin(1).post('/plans', { name: 'Hung mail', amount_sats: 1000, interval: 'weekly' })).body;
      const subscribe = async (chat: string) =>
        expect((await pub().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', messenger: chat })).status).toBe(201);
      await subscribe('4002');
      await until(
        async () => [taken.length, ownerTg().length],
        ([mails, chats]) => mails === 1 && chats === 1,
      );
      // The first owner e-mail still hangs: the next subscription's owner message is not held behind it.
      await subscribe('4003');
      expect(
        await until(
          async () => ownerTg().length,
          (n) => n === 2,
          15_000,
        ),
      ).toBe(2);
      expect(taken[0]!.closed).toBe(false);
    } finally {
      await forget(1, 'hung@example.com');
      hung.close();
      for (const c of taken) c.socket.destroy();
    }
  });

  /** Wallet 0's owner hears of a new checkout of a new plan on Telegram within 10 s (while another route hangs). */
  const ownerHearsWithin10s = async (planName: string, email: string) => {
    const ownerTg = () => tgTo('1001').filter((m) => m.text.startsWith('New subscription'));
    const before = ownerTg().length;
    const ours = (await admin().post('/plans', { name: planName, amount_sats: 1000, interval: 'weekly' })).body;
    expect((await pub().post('/public/subscribe', { plan_id: ours.id, payment_method: 'lightning', email })).status).toBe(201);
    expect(
      await until(
        async () => ownerTg().length,
        (n) => n > before,
        10_000,
      ),
    ).toBe(before + 1);
  };

  it("one owner's mail server that never greets holds a share of the places, not every owner's notices (found from outside)", async () => {
    const taken: Socket[] = [];
    const hung = createNetServer((socket) => taken.push(socket));
    await new Promise<void>((r) => hung.listen(0, '127.0.0.1', r));
    try {
      const put = await admin(1).put('/notification-settings', {
        channels: { email: { smtp_url: `smtp://127.0.0.1:${(hung.address() as AddressInfo).port}`, owner_email: 'hung@example.com' } },
        owner_events: ['subscription.created'],
      });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      const hungPlan = (await admin(1).post('/plans', { name: 'Hung owner', amount_sats: 1000, interval: 'weekly' })).body;
      // More owner e-mails than the notifier has places (32): each waits on its connection for 20 s.
      for (let i = 0; i < 40; i++) {
        const res = await pub().post('/public/subscribe', { plan_id: hungPlan.id, payment_method: 'lightning', email: `crowd${i}@example.com` });
        expect(res.status).toBe(201);
      }
      await until(
        async () => taken.length,
        (n) => n >= 16,
      );
      // Another owner's notice goes out while they hang, not 20 s later.
      await ownerHearsWithin10s('Not held up', 'free@example.com');
      // The hung server holds the wallet's share of its channel, no more.
      expect(taken.length).toBe(16);
      expect(taken.every((sock) => !sock.destroyed)).toBe(true);
    } finally {
      await forget(1, 'hung@example.com');
      hung.close();
      for (const sock of taken) sock.destroy();
    }
  });

  it("the server's mail server hung holds one share for every wallet's e-mails, then only the slow share after its timeout", async () => {
    // Every wallet without a mail server of its own sends through SMTP_URL: one route for all of them.
    const owner = 'shared-owner@example.com';
    const refusing = createNetServer();
    await new Promise<void>((r) => refusing.listen(0, '127.0.0.1', r));
    const refusingPort = (refusing.address() as AddressInfo).port;
    await new Promise<void>((r) => refusing.close(() => r()));
    let start = 0;
    const settings = (email: object) => admin(1).put('/notification-settings', { channels: { email }, owner_events: ['subscription.created'] });
    const pendingTo = async () =>
      (await rows(`SELECT attempt_count FROM notifier.notifications WHERE recipient = $1 AND status = 'pending'`, [owner])).map((r) => r.attempt_count);
    try {
      // First through the owner's own mail server, which refuses: each owner e-mail waits 30 s to be retried.
      expect((await settings({ smtp_url: `smtp://u:p@127.0.0.1:${refusingPort}`, owner_email: owner })).status).toBe(200);
      const p = (await admin(1).post('/plans', { name: 'Shared mail', amount_sats: 1000, interval: 'weekly' })).body;
      const checkouts = async (n: number, tag: string) => {
        for (let i = 0; i < n; i++)
          expect((await pub().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: `${tag}${i}@example.com` })).status).toBe(201);
      };
      await checkouts(20, 'own-crowd');
      await until(pendingTo, (a) => a.length === 20 && a.every((n) => n >= 1));
      serverSmtp.hang(true);
      start = serverSmtp.state.connections;
      // Then through the server's: those 20 and 20 more go one route, more than the notifier has places (32).
      expect((await settings({ smtp_url: null, owner_email: owner })).status).toBe(200);
      await checkouts(20, 'shared-crowd');
      await advance(60);
      await until(
        async () => serverSmtp.state.connections - start,
        (n) => n >= 16,
      );
      // Another wallet's Telegram notice goes out while the shared server hangs.
      await ownerHearsWithin10s('Beside the shared server', 'beside@example.com');
      expect(serverSmtp.state.connections - start).toBe(16);
      // Each of the 16 runs into its 20 s timeout; then the route is slow and gets 2 places, not 16 again.
      await until(
        async () => serverSmtp.state.connections - start,
        (n) => n > 16,
        40_000,
      );
      await settle(3000);
      expect(serverSmtp.state.connections - start).toBe(18);
      expect(serverSmtp.state.open).toBe(2);
    } finally {
      serverSmtp.hang(false);
      await forget(1, owner);
    }
  }, 90_000);

  it("the owner's choice of subscriber notices holds: only the cancellation goes out when none is chosen", async () => {
    const quiet = (await admin().post('/plans', { name: 'Quiet', amount_sats: 1000, interval: 'weekly', trial_days: 3 })).body;
    const set = await admin().put(`/plans/${quiet.id}/notification-settings`, {
      inherit: false,
      channels: { messenger: {} },
      owner_events: [],
      subscriber_events: [],
    });
    expect(set.status).toBe(200);
    tg.chats.add('3010');
    const res = await pub().post('/public/subscribe', { plan_id: quiet.id, payment_method: 'lightning', messenger: '3010' });
    expect(res.status).toBe(201);
    await settle(2000);
    expect(tgTo('3010')).toEqual([]);
    expect((await admin().post(`/subscriptions/${res.body.subscription_id}/cancel`, {})).status).toBe(200);
    const got = await until(
      async () => tgTo('3010'),
      (x) => x.length >= 1,
    );
    expect(got.map((x) => x.text.split('\n')[0])).toEqual(['Your subscription to Quiet was cancelled']);
    // Nor is the expiry after dunning a notice the owner can turn off (behaviour.md: subscriber notified).
    tg.chats.add('3011');
    const lapsing = await pub().post('/public/subscribe', { plan_id: quiet.id, payment_method: 'lightning', messenger: '3011' });
    expect(lapsing.status).toBe(201);
    // The trial (3 days), then the unpaid renewal through grace (none) and dunning (14 days).
    await advance(3 * 86_400 + 60);
    await advance(14 * 86_400 + 60);
    const expired = await until(
      async () => (await admin().get(`/subscriptions/${lapsing.body.subscription_id}`)).body,
      (b) => b.status === 'expired',
    );
    expect(expired.status).toBe('expired');
    const told = await until(
      async () => tgTo('3011'),
      (x) => x.length >= 1,
    );
    expect(told.map((x) => x.text.split('\n')[0])).toEqual([expect.stringMatching(/^Your subscription to Quiet has expired/)]);
  });

  it('a relay that is down, then up: the direct message is retried and published once', async () => {
    const port = await freePort();
    const url = `ws://127.0.0.1:${port}`;
    const sk = generateSecretKey();
    const daveSk = generateSecretKey();
    const p = (await admin(1).post('/plans', { name: 'Relay plan', amount_sats: 1000, interval: 'weekly', trial_days: 3 })).body;
    const set = await admin(1).put(`/plans/${p.id}/notification-settings`, {
      inherit: false,
      channels: { nostr: { private_key: Buffer.from(sk).toString('hex'), relays: [url] } },
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    const res = await pub().post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', nostr: nip19.npubEncode(getPublicKey(daveSk)) });
    expect(res.status).toBe(201);
    const own = client(stack.api, stack.wallets[1]!.invoice_key);
    const notice = () => own.get(`/notifications?subscription_id=${res.body.subscription_id}`).then((r) => r.body.items[0]);
    const first = await until(notice, (n: any) => n?.attempt_count === 1);
    expect(first).toMatchObject({ channel: 'nostr', status: 'pending', attempts: [{ permanent: false, error: expect.stringMatching(/no relay accepted/) }] });
    const late = await startNostrRelay({ port });
    try {
      await advance(31);
      const done = await until(notice, (n: any) => n?.status === 'delivered');
      expect(done.attempt_count).toBe(2);
      await advance(600);
      await settle();
      const got = dms(late, daveSk);
      expect(got).toHaveLength(1);
      expect(got[0]!.text).toContain('Your free trial of Relay plan has started');
      expect(got[0]!.from).toBe(getPublicKey(sk));
    } finally {
      await late.stop();
    }
  });

  it('NIP-04 for older clients is a per-wallet option, sent with the owner-given key', async () => {
    const sk = generateSecretKey();
    const res = await admin(1).put('/notification-settings', {
      channels: { nostr: { private_key: nip19.nsecEncode(sk), relays: [relay.url], owner_pubkey: getPublicKey(ownerSk), nip04: true } },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).not.toHaveProperty('generated_private_key');
    expect(res.body.channels.email).toBeNull();
    const sent = await admin(1).post('/notification-settings/test', { channel: 'nostr' });
    expect(sent.body).toMatchObject({ delivered: true });
    const legacy = dms(relay, ownerSk).filter((x) => x.kind === 4);
    expect(legacy).toHaveLength(1);
    expect(legacy[0]!.from).toBe(getPublicKey(sk));
    expect(legacy[0]!.text).toContain('Test notification');
  });

  it('no secret in any response, log line or database row in plain text', async () => {
    const generatedHex = Buffer.from(nip19.decode(generatedNsec).data as Uint8Array).toString('hex');
    const secrets = [TOKEN.split(':')[1]!, TOKEN2.split(':')[1]!, OWNER_SMTP_PASS, generatedHex, generatedNsec];
    const logs = Object.values(stack.services)
      .flatMap((s) => s.lines)
      .join('\n');
    expect(logs).toContain('notification delivered');
    for (const s of secrets) expect(logs).not.toContain(s);
    const dump = (
      await rows(`SELECT string_agg(t::text, '\n') AS t FROM (
      SELECT s::text AS t FROM notifier.settings s UNION ALL SELECT n::text FROM notifier.notifications n
      UNION ALL SELECT a::text FROM notifier.notification_attempts a UNION ALL SELECT k::text FROM gateway.idempotency_keys k) x`)
    )[0].t as string;
    for (const s of secrets) expect(dump).not.toContain(s);
    // Portal tokens travel in messages: sealed too.
    expect(dump).not.toMatch(/manage\?token=/);
  });

  it('an attempt is recorded together with its outcome or not at all: a failed status update leaves no attempt', async () => {
    const w = stack.wallets[1]!;
    await rows(`DELETE FROM notifier.settings WHERE wallet_id = $1`, [w.id]); // the defaults: e-mail through the server's mail server
    const plan = (await admin(1).post('/plans', { name: 'Tx plan', amount_sats: 1000, interval: 'weekly', trial_days: 3 })).body;
    // The database refuses the status update of this wallet's messages after the send (as an outage would).
    await rows(`CREATE OR REPLACE FUNCTION public.refuse_finish() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`);
    await rows(`CREATE TRIGGER refuse_finish BEFORE UPDATE ON notifier.notifications FOR EACH ROW
      WHEN (NEW.attempt_count > OLD.attempt_count AND OLD.wallet_id = '${w.id}') EXECUTE FUNCTION public.refuse_finish()`);
    try {
      const res = await pub().post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'tx@example.com' });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      await until(
        async () => serverSmtp.mails.filter((m) => m.to.includes('tx@example.com')).length,
        (n) => n > 0,
      );
      await settle(800);
      const listed = (await client(stack.api, w.invoice_key).get(`/notifications?subscription_id=${res.body.subscription_id}`)).body;
      expect(listed.items.length).toBeGreaterThan(0);
      for (const n of listed.items) expect(n).toMatchObject({ status: 'pending', attempt_count: 0, attempts: [] });
      const [{ n }] = await rows(
        `SELECT count(*)::int AS n FROM notifier.notification_attempts a JOIN notifier.notifications x ON x.id = a.notification_id WHERE x.subscription_id = $1`,
        [res.body.subscription_id],
      );
      expect(n).toBe(0);
    } finally {
      await rows(`DROP TRIGGER IF EXISTS refuse_finish ON notifier.notifications`);
    }
  });
});

describe('one-click unsubscribe (RFC 2369 / 8058)', () => {
  it('OPTIONS and a method it does not take name every method the URL serves (review finding)', async () => {
    const at = `${stack.api}/public/unsubscribe/sub_x.reminders.${'A'.repeat(43)}`;
    const methods = (r: Response) => new Set(r.headers.get('allow')?.split(/,\s*/));
    for (const method of ['OPTIONS', 'PUT', 'DELETE']) {
      const r = await fetch(at, { method });
      expect([r.status, methods(r)], method).toEqual([405, new Set(['GET', 'HEAD', 'POST'])]);
    }
  });

  it('its GET as JSON names merchant, plan and notices and changes nothing (review finding)', async () => {
    const w = stack.wallets[1]!;
    try {
      const put = await admin(1).put('/notification-settings', { channels: { email: {} }, merchant_name: 'Letter Shop' });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      const plan = (await admin(1).post('/plans', { name: 'Readlink', amount_sats: 1000, interval: 'weekly', trial_days: 2 })).body;
      const to = 'readlink@example.com';
      const res = await pub().post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: to });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      const sub = res.body.subscription_id as string;
      const started = await until(
        async () => mailsTo(to).find((m) => /free trial of Readlink has started/.test(m.subject)),
        (m) => !!m,
      );
      const link = new URL(/^<(.+)>$/.exec(started!.headers['list-unsubscribe']!)![1]!);
      const at = (token = decodeURIComponent(link.pathname.split('/').pop()!)) =>
        `${stack.gatewayUrl}${link.pathname.replace(/[^/]+$/, encodeURIComponent(token))}`;
      const asJson = (url: string, method = 'GET') => fetch(url, { method, headers: { Accept: 'application/json' } });
      const flags = async () =>
        (await rows('SELECT receive_reminders, receive_confirmations FROM billing.subscriptions WHERE id = $1', [sub]))[0] as Record<string, boolean>;

      // What the page names before anything is pressed; a browser's GET of the same URL is the page.
      const read = await asJson(at());
      expect(read.status).toBe(200);
      expect(await read.json()).toEqual({ kind: 'confirmations', plan_name: 'Readlink', merchant_name: 'Letter Shop', receiving: true, ended: false });
      const page = await fetch(at(), { headers: { Accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' } });
      expect([page.status, page.headers.get('content-type')]).toEqual([200, 'text/html; charset=utf-8']);
      // One URL, two answers (review finding): caches keep them apart, and the JSON is not kept at all (a
      // browser's Back showed the page's JSON in place of the page).
      expect([page.headers.get('vary'), read.headers.get('vary')]).toEqual([expect.stringMatching(/^Accept\b/), 'Accept']);
      expect(read.headers.get('cache-control')).toBe('no-store');
      expect((await fetch(at(), { method: 'HEAD', headers: { Accept: 'application/json' } })).status).toBe(200);
      expect(await flags()).toEqual({ receive_reminders: true, receive_confirmations: true });

      // A forged or garbled token is 404 at once, read or posted, and changes nothing. The MAC in standard
      // base64 (`+`, `/`) is another spelling of the same link: refused, one token has one spelling.
      const [id, kind, mac] = decodeURIComponent(link.pathname.split('/').pop()!).split('.') as [string, string, string];
      const standard = mac.replace(/-/g, '+').replace(/_/g, '/');
      const forged = [`${id}.reminders.${mac}`, `${id}.${kind}.${mac.slice(0, -2)}AA`, 'garbled', `${id}.${kind}.${mac}=`];
      if (standard !== mac) forged.push(`${id}.${kind}.${standard}`); // a MAC without `-` or `_` (1 in 4) is spelt the same
      for (const token of forged) {
        expect((await asJson(at(token))).status, token).toBe(404);
        expect((await asJson(at(token), 'POST')).status, token).toBe(404);
      }
      expect(await flags()).toEqual({ receive_reminders: true, receive_confirmations: true });

      // Used: the same GET says so.
      expect((await asJson(at(), 'POST')).status).toBe(200);
      expect((await (await asJson(at())).json()).receiving).toBe(false);
      expect(await flags()).toEqual({ receive_reminders: true, receive_confirmations: false });
    } finally {
      await rows(`DELETE FROM notifier.settings WHERE wallet_id = $1`, [w.id]);
    }
  });

  // Last in the file: it moves the clock a week on.
  it('reminders and receipts carry List-Unsubscribe for their kind, a cancel none; its POST turns that kind off, its GET nothing', async () => {
    const w = stack.wallets[1]!;
    await rows(`DELETE FROM notifier.settings WHERE wallet_id = $1`, [w.id]); // the defaults: e-mail through the server's mail server
    const owner = client(stack.api, w.admin_key);
    const plan = (await owner.post('/plans', { name: 'Oneclick', amount_sats: 1000, interval: 'weekly', trial_days: 2 })).body;
    const to = 'oneclick@example.com';
    const res = await pub().post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: to });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const sub = res.body.subscription_id as string;
    const portalToken = new URL(res.body.manage_url).searchParams.get('token')!;
    const mail = async (subject: RegExp) =>
      (await until(
        async () => mailsTo(to).find((m) => subject.test(m.subject)),
        (m) => !!m,
      ))!;
    const target = (header: string) => {
      const url = /^<(https?:\/\/[^>]+)>$/.exec(header)?.[1];
      expect(url, header).toBeDefined();
      return new URL(url!);
    };
    const flags = async () =>
      (await rows('SELECT receive_reminders, receive_confirmations FROM billing.subscriptions WHERE id = $1', [sub]))[0] as Record<string, boolean>;

    // The trial's start is a confirmation: its header unsubscribes from confirmations.
    const started = await mail(/free trial of Oneclick has started/);
    expect(started.headers['list-unsubscribe-post']).toBe('List-Unsubscribe=One-Click');
    const confirmations = target(started.headers['list-unsubscribe']!);

    await advance(86_400 + 120);
    // The trial's last day: its reminder is the trial-end notice too.
    const reminder = await mail(/^Your free trial of Oneclick is ending: payment due$/);
    expect(reminder.headers['list-unsubscribe-post']).toBe('List-Unsubscribe=One-Click');
    const reminders = target(reminder.headers['list-unsubscribe']!);
    // Visible too, not only to mail programs that show the header (found from outside): the same link, whose GET asks first.
    expect(reminder.text).toContain(`Stop these reminders: ${reminders.href}`);
    expect(reminder.html).toContain(`Stop these reminders: <a href="${reminders.href}">`);
    expect(reminder.text).toContain('You also choose there which notices you get.');
    expect(started.text).toContain(`Stop these confirmations: ${confirmations.href}`);
    // Made from PUBLIC_BASE_URL like the portal link, a URL of its own per kind, and never the portal token
    // (mail providers keep and fetch these URLs).
    expect(reminders.origin).toBe(new URL(res.body.manage_url).origin);
    expect(reminders.pathname).toMatch(/\/subscriptions_manager\/api\/v1\/public\/unsubscribe\/[^/]+$/);
    expect(reminders.href).not.toBe(confirmations.href);
    for (const u of [reminders, confirmations]) expect(u.href).not.toContain(portalToken);
    const at = (u: URL) => `${stack.gatewayUrl}${u.pathname}`;

    // A GET (a link scanner, a person opening it) changes nothing: a browser gets a page that asks first.
    const page = await fetch(at(reminders), { headers: { Accept: 'text/html,application/xhtml+xml,*/*;q=0.8' } });
    expect((await fetch(at(reminders))).status).toBe(200); // a client that takes anything: the JSON
    expect([page.status, page.headers.get('content-type')]).toEqual([200, 'text/html; charset=utf-8']);
    expect(await flags()).toEqual({ receive_reminders: true, receive_confirmations: true });

    // The mail provider's POST (RFC 8058): reminders off, confirmations untouched; again: 200, still off.
    const oneClick = (u: URL, init: RequestInit = {}) =>
      fetch(at(u), { method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'List-Unsubscribe=One-Click', ...init });
    const first = await oneClick(reminders);
    expect(first.status).toBe(200);
    expect(await first.json()).toMatchObject({ success: true, message: expect.stringContaining('no longer get reminders for Oneclick') });
    expect(await flags()).toEqual({ receive_reminders: false, receive_confirmations: true });
    const form = new FormData();
    form.set('List-Unsubscribe', 'One-Click');
    expect((await oneClick(reminders, { headers: {}, body: form })).status).toBe(200); // multipart, as RFC 8058 prefers
    expect(await flags()).toEqual({ receive_reminders: false, receive_confirmations: true });
    // A token changed on the way (its kind swapped, its signature cut) names nothing.
    const [id, , mac] = decodeURIComponent(reminders.pathname.split('/').pop()!).split('.');
    for (const forged of [`${id}.confirmations.${mac}`, `${id}.reminders.${mac!.slice(0, -2)}AA`, 'sub_x', `${sub}.reminders.`]) {
      const r = await oneClick(new URL(`${reminders.origin}${reminders.pathname.replace(/[^/]+$/, forged)}`));
      expect(r.status, forged).toBe(404);
    }
    expect(await flags()).toEqual({ receive_reminders: false, receive_confirmations: true });
    // The link's token never expires: the gateway's access log shows the route, not the token (review finding).
    const token = decodeURIComponent(reminders.pathname.split('/').pop()!);
    const logged = stack.services.gateway.lines.filter((l) => l.includes('/public/unsubscribe/'));
    expect(logged.length).toBeGreaterThan(0);
    expect(logged.filter((l) => l.includes(token.split('.').pop()!))).toEqual([]);

    // The renewal paid: its receipt still comes, with the confirmations header.
    const due = (await until(
      async () => (await client(stack.api, w.invoice_key).get(`/payments?subscription_id=${sub}&status=pending`)).body.items,
      (i: any[]) => i?.length === 1,
    ))![0];
    expect((await pub().post(`/dev/payments/${due.id}/pay`)).status).toBe(200);
    const receipt = await mail(/Oneclick (is active|was renewed)/);
    expect(target(receipt.headers['list-unsubscribe']!).href).toBe(confirmations.href);

    // The next period's reminder is made, and not sent by e-mail.
    await until(
      () => owner.get(`/subscriptions/${sub}`),
      (r) => r.body.status === 'active' && r.body.payments?.some((p: { status: string }) => p.status === 'paid'),
    );
    await advance(7 * 86_400);
    const reminderEvents = async () =>
      rows(
        `SELECT payload->'data' AS data FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = $1 ORDER BY seq`,
        [sub],
      );
    const events = await until(reminderEvents, (e) => e.length === 2);
    expect(events.map((e) => e.data.notify_subscriber)).toEqual([true, false]);

    // A cancellation is always sent: no unsubscribe header. Sent after the reminder, it also shows that
    // the notifier has handled that event by now.
    expect((await owner.post(`/subscriptions/${sub}/cancel`, {})).status).toBe(200);
    const cancelled = await mail(/Oneclick was cancelled/);
    expect(cancelled.headers['list-unsubscribe']).toBeUndefined();
    expect(cancelled.headers['list-unsubscribe-post']).toBeUndefined();
    await settle();
    expect(mailsTo(to).filter((m) => /payment due/i.test(m.subject))).toHaveLength(1);

    // Found from outside: a link with a tracker's parameter was 422, and one Idempotency-Key used on two
    // links (a mail client's retries) was 409 on the second, which stayed subscribed.
    const keyed = (u: URL, query = '') =>
      fetch(`${at(u)}${query}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/x-www-form-urlencoded', 'Idempotency-Key': 'mail-client-1' },
        body: 'List-Unsubscribe=One-Click',
      });
    expect((await keyed(reminders, '?utm_source=newsletter')).status).toBe(200);
    const late = await keyed(confirmations);
    expect(late.status).toBe(200);
    // Cancelled by now: taken all the same, without words sending the subscriber to a portal that refuses
    // to switch it back (found from outside).
    expect((await late.json()).message).toBe('You will no longer get confirmations and receipts for Oneclick, which was cancelled.');
    expect(await flags()).toEqual({ receive_reminders: false, receive_confirmations: false });
  });
});

describe('the last call', () => {
  it('a day before the end, its invoice still open: the reminder carries the pay link to the portal on every channel (found from outside: none)', async () => {
    const { advanceTo } = devClock(admin);
    const utc = (t: number) => `${new Date(t * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
    const plan = (await admin().post('/plans', { name: 'Lastcall', amount_sats: 3000, interval: 'monthly' })).body;
    const sk = generateSecretKey();
    tg.chats.add('2031');
    const to = 'lastcall@example.com';
    // No preference: every contact the plan's channels cover.
    const co = (
      await pub().post('/public/subscribe', {
        plan_id: plan.id,
        payment_method: 'lightning',
        email: to,
        messenger: '2031',
        nostr: nip19.npubEncode(getPublicKey(sk)),
      })
    ).body;
    expect((await pub().post(`/dev/payments/${co.payment_id}/pay`)).status).toBe(200);
    const sub = await until(
      async () => (await reader().get(`/subscriptions/${co.subscription_id}`)).body,
      (s) => s.status === 'active',
    );
    const end = sub.current_period_end as number;
    const reminders = async () =>
      rows(
        `SELECT payload->'data' AS data FROM billing.outbox WHERE payload->>'event' = 'renewal.reminder' AND payload->'data'->>'subscription_id' = $1 ORDER BY seq`,
        [co.subscription_id],
      );
    // Monthly: the invoice 3 days ahead (told), its replacement a day later (not told), then the last call
    // a day before the end while that replacement is still payable: a reminder without an invoice of its own.
    await advanceTo(end - 3 * 86_400 + 60);
    const [first] = await until(reminders, (r) => r.length === 1);
    await advanceTo(first.data.expires_at + 60);
    await until(reminders, (r) => r.length === 2);
    await advanceTo(end - 86_400 + 10);
    const sent = await until(reminders, (r) => r.length === 3);
    expect(sent.map((r) => [r.data.notify_subscriber, r.data.payment_request ?? null])).toEqual([
      [true, expect.stringMatching(/^ln/)],
      [false, expect.stringMatching(/^ln/)],
      [true, null],
    ]);

    const due = 'Payment due for Lastcall';
    const payLine = `\nPay it in your portal, which always has a payable invoice: ${co.manage_url}\n`;
    const twice = (texts: string[]) => texts.filter((t) => t.includes(due)).length >= 2;
    const channels = {
      messenger: await until(async () => tgTo('2031').map((x) => x.text), twice),
      nostr: await until(async () => dms(relay, sk).map((x) => x.text), twice),
      email: await until(async () => mailsTo(to).map((x) => `${x.subject}\n${x.text}`), twice),
    };
    for (const [channel, texts] of Object.entries(channels)) {
      // Told apart by what they carry: a channel may deliver them in either order (found in CI).
      const dueTexts = texts.filter((t) => t.includes(due));
      const invoice = dueTexts.find((t) => /\nlightning:ln\w+\n/.test(t));
      const lastCall = dueTexts.find((t) => !/\nlightning:ln/.test(t));
      expect(
        [invoice, lastCall].map((t) => typeof t),
        channel,
      ).toEqual(['string', 'string']);
      expect(lastCall, channel).toContain(`renews on ${utc(end)} for 3,000 sats.`);
      expect(lastCall, channel).toContain(payLine);
      expect(lastCall, channel).toContain(` if paid by ${utc(end)}; paid later, one month from the payment.\n`);
      expect(invoice, channel).toMatch(/\nlightning:ln\w+\n/);
      expect(invoice, channel).toContain(payLine);
    }
    const html = mailsTo(to).filter((m) => m.subject === due);
    expect(html).toHaveLength(2);
    for (const m of html) expect(m.html).toContain(`Pay it in your portal, which always has a payable invoice: <a href="${co.manage_url}">`);
  });
});
