import { createDb, type Db, migrate } from '@sb/runtime';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createDatabase } from '../../../test/support/stack.js';
import { MessengerRepo } from '../src/store/messenger.repo.js';
import { migrations } from '../src/store/migrations.js';

let db: Db;
let drop: () => Promise<void>;
const repo = new MessengerRepo('notifier');
beforeAll(async () => {
  const created = await createDatabase('sb_tg');
  drop = created.drop;
  db = createDb(created.url, { max: 2 });
  await migrate(db, 'notifier', migrations);
});
afterAll(async () => {
  await db?.close();
  await drop?.();
});

it('two replicas: one holds a bot until it saves or its lease runs out; a late save of the other changes nothing', async () => {
  const now = 1_800_000_000;
  const a = await repo.lease(db, 42, now, now + 60, 'replica-a');
  expect(a).toEqual({ next_offset: 0, username: null, token_hash: null });
  expect(await repo.lease(db, 42, now + 1, now + 61, 'replica-b')).toBeUndefined();
  // A's lease runs out while its poll hangs: B takes the bot and saves first.
  const b = await repo.lease(db, 42, now + 60, now + 120, 'replica-b');
  expect(b).toEqual({ next_offset: 0, username: null, token_hash: null });
  const saved = { links: [{ username: 'alice', chat_id: 7 }], nextOffset: 5, username: 'shop_bot', tokenHash: 'h1', now: now + 61 };
  expect(await repo.polled(db, 42, 'replica-b', saved)).toBe(true);
  // A's late answer (older updates, another chat) is not saved: its mark no longer holds the bot.
  expect(await repo.polled(db, 42, 'replica-a', { ...saved, links: [{ username: 'alice', chat_id: 99 }], nextOffset: 3 })).toBe(false);
  await repo.pollFailed(db, 42, 'replica-a', 'late failure', now + 62, now + 600);
  expect(await repo.linkOf(db, 42, 'alice')).toEqual({ chat_id: 7, bot_error: null });
  expect(await repo.lease(db, 42, now + 62, now + 122, 'replica-a')).toEqual({ next_offset: 5, username: 'shop_bot', token_hash: 'h1' });
  // A failed poll waits until its retry time; the error explains waiting notices.
  await repo.pollFailed(db, 42, 'replica-a', '409 Conflict', now + 63, now + 300);
  expect(await repo.lease(db, 42, now + 299, now + 359, 'replica-b')).toBeUndefined();
  expect(await repo.linkOf(db, 42, 'nobody')).toEqual({ chat_id: null, bot_error: '409 Conflict' });
  expect(await repo.lease(db, 42, now + 300, now + 360, 'replica-b')).toMatchObject({ next_offset: 5 });
});

it('a chat seen under a new username loses the old one; another bot keeps its own links; the bot name needs its token', async () => {
  const now = 1_800_001_000;
  await repo.lease(db, 50, now, now + 60, 'm1');
  await repo.polled(db, 50, 'm1', { links: [{ username: 'bob', chat_id: 8 }], nextOffset: 2, username: 'b50', tokenHash: 'h50', now });
  await repo.lease(db, 51, now, now + 60, 'm2');
  await repo.polled(db, 51, 'm2', { links: [{ username: 'bob', chat_id: 80 }], nextOffset: 2, username: 'b51', tokenHash: 'h51', now });
  await repo.lease(db, 50, now + 1, now + 61, 'm3');
  await repo.polled(db, 50, 'm3', { links: [{ username: 'bobby', chat_id: 8 }], nextOffset: 3, username: null, tokenHash: 'h50', now: now + 1 });
  expect((await repo.linkOf(db, 50, 'bob')).chat_id).toBeNull();
  expect((await repo.linkOf(db, 50, 'bobby')).chat_id).toBe(8);
  expect((await repo.linkOf(db, 51, 'bob')).chat_id).toBe(80);
  expect(await repo.usernameOf(db, 50, 'h50')).toBe('b50');
  expect(await repo.usernameOf(db, 50, 'someone-elses-token')).toBeNull();
  await repo.unlink(db, 51, 'bob', 80);
  expect((await repo.linkOf(db, 51, 'bob')).chat_id).toBeNull();
});
