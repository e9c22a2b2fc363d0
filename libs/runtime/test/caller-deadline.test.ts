import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../../test/support/stack.js';
import { createDb, type Db } from '../src/db.js';
import { CALLER_DEADLINE_MARGIN_MS, CallerGoneError, withCallerDeadline } from '../src/deadline.js';

/**
 * A request's transaction that reaches COMMIT after its caller stopped waiting is rolled back (found from
 * outside: billing or its database stalled past the gateway's wait, the gateway answered 503 "please
 * retry", the change was committed after it, and the retry made it twice).
 */
let db: Db;
let dropDb: () => Promise<void>;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const names = async () => (await db.query<{ name: string }>('SELECT name FROM made ORDER BY name')).rows.map((r) => r.name);
const insert = (name: string, stallMs = 0) =>
  db.tx(async (q) => {
    await q.query('INSERT INTO made (name) VALUES ($1)', [name]);
    await sleep(stallMs);
  });

beforeAll(async () => {
  const created = await createDatabase('sb_deadline');
  dropDb = created.drop;
  db = createDb(created.url, { max: 4 });
  await db.query('CREATE TABLE made (name TEXT PRIMARY KEY)');
});
afterAll(async () => {
  await db?.close();
  await dropDb?.();
});

describe('a caller deadline', () => {
  it('commits what is done in time', async () => {
    await withCallerDeadline(Date.now() + CALLER_DEADLINE_MARGIN_MS + 5000, () => insert('in time'));
    expect(await names()).toContain('in time');
  });

  it('rolls back a transaction that reaches COMMIT after it, and says so', async () => {
    const by = Date.now() + 300;
    await expect(withCallerDeadline(by, () => insert('stalled', 600))).rejects.toBeInstanceOf(CallerGoneError);
    expect(await names()).not.toContain('stalled');
  });

  it('keeps to a short wait: the margin is at most a fifth of the time left (found in review: 500 ms of a 1 s wait)', async () => {
    await withCallerDeadline(Date.now() + 1000, () => insert('short wait', 300));
    expect(await names()).toContain('short wait');
  });

  it('does not start a request that arrives after it', async () => {
    let started = false;
    await expect(
      withCallerDeadline(Date.now() - 1, async () => {
        started = true;
      }),
    ).rejects.toBeInstanceOf(CallerGoneError);
    expect(started).toBe(false);
  });

  it('does not hold work the handler left running after it answered, nor work without a caller', async () => {
    let later: Promise<void> | undefined;
    await withCallerDeadline(Date.now() + CALLER_DEADLINE_MARGIN_MS + 200, async () => {
      later = sleep(400).then(() => insert('after the answer'));
    });
    await later;
    await insert('no caller', 10);
    expect(await names()).toEqual(expect.arrayContaining(['after the answer', 'no caller']));
  });
});
