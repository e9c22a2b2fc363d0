import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTelegramServer, type TelegramServer } from '../../../test/support/telegram-server.js';
import { botIdentity, botIdOf, botUpdates, fitText, sendMessenger, usernameOf } from '../src/channels/messenger.js';

const TOKEN = '9001:AAH-unit-bot-token-secret-0123456789';
let tg: TelegramServer;
let api: { apiUrl: string; token: string; timeoutMs: number };
beforeAll(async () => {
  tg = await startTelegramServer([TOKEN]);
  api = { apiUrl: tg.url, token: TOKEN, timeoutMs: 3000 };
});
afterAll(() => tg?.stop());

const message = (chat: { id: number; type: string }, from: Record<string, unknown>, text = '/start') => ({ message_id: 1, date: 0, chat, from, text });

describe('Telegram bot updates (against the local Bot API server)', () => {
  it('links private chats of people with a username; groups, bots and chats without a username link nobody', async () => {
    tg.pushUpdate(TOKEN, { update_id: 10, message: message({ id: -500, type: 'group' }, { id: 7, is_bot: false, username: 'in_a_group' }) });
    tg.pushUpdate(TOKEN, { update_id: 11, message: message({ id: 600, type: 'private' }, { id: 600, is_bot: true, username: 'other_bot' }) });
    tg.pushUpdate(TOKEN, { update_id: 12, message: message({ id: 700, type: 'private' }, { id: 700, is_bot: false }) });
    tg.pushUpdate(TOKEN, { update_id: 13, message: message({ id: 800, type: 'private' }, { id: 800, is_bot: false, username: 'Alice_1' }, 'hi') });
    tg.pushUpdate(TOKEN, { update_id: 14 });
    const r = await botUpdates(api, 0);
    expect(r).toEqual({
      ok: true,
      links: [{ username: 'alice_1', chat_id: 800 }],
      started: [{ chat_id: 700, username: null }],
      nextOffset: 15,
    });
    // Confirmed: asked from 15, nothing comes again.
    expect(await botUpdates(api, 15)).toMatchObject({ ok: true, links: [], started: [], nextOffset: 15 });
  });

  it('follows ids that start again lower (after a week without updates) instead of waiting past the highest seen', async () => {
    tg.press(TOKEN, 900, 'late_one');
    const pressed = tg.polls.length;
    const queue = await botUpdates(api, 15);
    expect(tg.polls.length).toBe(pressed + 1);
    expect(queue).toMatchObject({ ok: true, links: [{ username: 'late_one', chat_id: 900 }], started: [{ chat_id: 900, username: 'late_one' }] });
    // The fake numbers this update 1 (below 15): the next offset is 2, which confirms it.
    expect(queue.ok && queue.nextOffset).toBe(2);
    expect(await botUpdates(api, 2)).toMatchObject({ ok: true, links: [], nextOffset: 2 });
  });

  it("getMe names the token's bot; an unknown token or a webhook is the Bot API's error; ids and handles are read safely", async () => {
    expect(await botIdentity(api)).toEqual({ ok: true, id: 9001, username: 'shop9001_bot' });
    expect(await botIdentity({ ...api, token: '9001:AAH-not-the-right-secret-000000000' })).toMatchObject({ ok: false, code: 401 });
    tg.webhookSet.add(TOKEN);
    expect(await botUpdates(api, 0)).toMatchObject({ ok: false, code: 409 });
    tg.webhookSet.delete(TOKEN);
    expect(botIdOf(TOKEN)).toBe(9001);
    expect(botIdOf('12345678901234567890:AAH-too-big-for-an-id-0000000000')).toBeUndefined();
    expect([usernameOf('@Alice_1'), usernameOf('alice_1'), usernameOf('424242'), usernameOf('-1001')]).toEqual(['alice_1', 'alice_1', undefined, undefined]);
  });
});

describe('messages longer than Telegram takes (found from outside)', () => {
  it('cut in the body, never between the halves of an emoji: the portal link and signature at the end stay', async () => {
    tg.chats.add('4242');
    const footer = '\n\nManage, pay or cancel your subscription:\nhttp://x/manage?token=abc\n— Shop';
    // An emoji (two UTF-16 units) across every position the cut could fall on.
    const body = `Subject\n\nHello,\n\n${'😀'.repeat(2500)}`;
    for (const extra of ['', 'x']) {
      const text = `${body}${extra}${footer}`;
      expect((await sendMessenger(api, 4242, text)).delivered).toBe(true);
      const got = tg.sent.at(-1)!.text;
      expect(got.length).toBeLessThanOrEqual(4096);
      expect(got.endsWith(`…${footer}`)).toBe(true);
      expect(got.startsWith('Subject\n\nHello,')).toBe(true);
      expect(got.isWellFormed()).toBe(true);
    }
    for (let max = 60; max < 70; max++) expect(fitText(`${'😀'.repeat(40)}${footer}`, max).isWellFormed()).toBe(true);
    expect(fitText('short')).toBe('short');
  });
});

describe('Telegram answers that are not the Bot API', () => {
  it("a 200 that is no Bot API answer is retried and says so, not '200 OK' (found from outside)", async () => {
    const { createServer } = await import('node:http');
    const server = createServer((req, res) => {
      res.writeHead(200, { 'content-type': req.url?.includes('sendMessage') ? 'text/html' : 'application/json' });
      res.end(req.url?.includes('sendMessage') ? '<html>captive portal</html>' : '{"ok": false}');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const { port } = server.address() as { port: number };
    try {
      const proxy = { apiUrl: `http://127.0.0.1:${port}`, token: TOKEN, timeoutMs: 3000 };
      const sent = await sendMessenger(proxy, 42, 'hello');
      expect(sent).toMatchObject({ delivered: false, permanent: false, error: '200 OK, but not a Bot API answer' });
      expect(await botIdentity(proxy)).toMatchObject({ ok: false, why: '200 OK, but not a Bot API answer' });
    } finally {
      server.close();
    }
  });
});
