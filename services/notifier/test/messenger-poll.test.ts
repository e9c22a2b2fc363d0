import { randomBytes } from 'node:crypto';
import { createDb, type Db, migrate, SecretBox } from '@sb/runtime';
import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createDatabase } from '../../../test/support/stack.js';
import { startTelegramServer, type TelegramServer } from '../../../test/support/telegram-server.js';
import type { Deps } from '../src/deps.js';
import { MessengerRepo } from '../src/store/messenger.repo.js';
import { migrations } from '../src/store/migrations.js';
import { pollMessengerBots } from '../src/workers.js';
import { tokenHashOf } from '../src/channels/messenger.js';

/**
 * The polling of a bot against the local Bot API server: who the token belongs to (getMe) is asked once
 * per token, not on every poll. Found from outside: a bot whose getUpdates failed (a webhook set) asked
 * getMe again on each of its polls, as its identity was kept only with a successful poll.
 */
const TOKEN = '9101:AAH-poll-bot-token-secret-0123456789';
let db: Db;
let drop: () => Promise<void>;
let tg: TelegramServer;
let d: Deps;
beforeAll(async () => {
  const created = await createDatabase('sb_tgpoll');
  drop = created.drop;
  db = createDb(created.url, { max: 2 });
  await migrate(db, 'notifier', migrations);
  tg = await startTelegramServer([TOKEN]);
  const secrets = new SecretBox(randomBytes(32).toString('hex'));
  await db.query(`INSERT INTO notifier.settings (wallet_id, plan_id, config, secrets_sealed, updated_at) VALUES ($1, '', $2, $3, 0)`, [
    'wal_poll',
    JSON.stringify({ channels: { messenger: {} } }),
    secrets.seal(JSON.stringify({ bot_token: TOKEN })),
  ]);
  d = {
    db,
    log: pino({ level: 'silent' }),
    messenger: new MessengerRepo('notifier'),
    secrets,
    channels: { messengerApiUrl: tg.url, timeoutMs: 3000 },
  } as unknown as Deps;
});
afterAll(async () => {
  await tg?.stop();
  await db?.close();
  await drop?.();
});

/** One poll round, as if the bot's wait after its last failure had passed. */
async function pollNow(): Promise<void> {
  await db.query('UPDATE notifier.messenger_bots SET lease_until = 0');
  await pollMessengerBots(d);
}

it('asks getMe once for a token, while its polls fail and once they work again', async () => {
  tg.webhookSet.add(TOKEN);
  for (let i = 0; i < 3; i++) await pollNow();
  expect(tg.methodCalls.get('getUpdates')).toBe(3);
  const { rows } = await db.query<{ last_error: string }>('SELECT last_error FROM notifier.messenger_bots');
  expect(rows[0]?.last_error).toMatch(/^409/);

  tg.webhookSet.delete(TOKEN);
  tg.press(TOKEN, 5151, 'poll_reader');
  for (let i = 0; i < 2; i++) await pollNow();
  expect(tg.methodCalls.get('getUpdates')).toBe(5);
  expect(await d.messenger.linkOf(db, 9101, 'poll_reader')).toEqual({ chat_id: 5151, bot_error: null });
  expect(await d.messenger.usernameOf(db, 9101, tokenHashOf(TOKEN))).toBe('shop9101_bot');
  expect(tg.methodCalls.get('getMe')).toBe(1);
});
