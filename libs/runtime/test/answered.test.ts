import { afterAll, beforeAll, expect, it } from 'vitest';
import { createDatabase } from '../../../test/support/stack.js';
import { AnsweredRequests, answerOnce, answeredRequestsTableSql } from '../src/answered.js';
import { createDb, type Db } from '../src/db.js';
import { SecretBox } from '../src/secrets.js';

let db: Db;
let drop: () => Promise<void>;
const answered = new AnsweredRequests('a', new SecretBox('22'.repeat(32)));
beforeAll(async () => {
  const created = await createDatabase('sb_answered');
  drop = created.drop;
  db = createDb(created.url, { max: 2 });
  await db.query(`CREATE SCHEMA a; SET search_path TO a; ${answeredRequestsTableSql}`);
});
afterAll(async () => {
  await db?.close();
  await drop?.();
});

it('keeps an answer sealed for 24 hours: found, not recorded twice, then replaced and purged', async () => {
  expect(await answered.record(db, 'k1', 'h1', { id: 'plan_1', name: 'Gold' })).toBe(true);
  expect(await answered.find(db, 'k1')).toEqual({ request_hash: 'h1', answer: { id: 'plan_1', name: 'Gold' } });
  const stored = await db.query<{ answer_sealed: string }>(`SELECT answer_sealed FROM a.answered_requests WHERE key = 'k1'`);
  expect(stored.rows[0]!.answer_sealed).not.toContain('Gold');
  // A second try of the request lost the race on the key: its transaction must roll back.
  expect(await answered.record(db, 'k1', 'h1', { id: 'plan_2' })).toBe(false);

  await db.query(`UPDATE a.answered_requests SET created_at = now() - interval '25 hours' WHERE key = 'k1'`);
  expect(await answered.find(db, 'k1')).toBeUndefined();
  expect(await answered.record(db, 'k1', 'h2', { id: 'plan_3' })).toBe(true);
  expect((await answered.find(db, 'k1'))?.answer).toEqual({ id: 'plan_3' });

  await db.query(`INSERT INTO a.answered_requests (key, request_hash, answer_sealed, created_at)
    SELECT 'old' || i, 'h', 'x', now() - interval '25 hours' FROM generate_series(1, 7) i`);
  expect(await answered.purgeExpired(db, 3)).toBe(7);
  const left = await db.query<{ key: string }>(`SELECT key FROM a.answered_requests`);
  expect(left.rows.map((r) => r.key)).toEqual(['k1']);
});

it("keeps an answer as JSON in a service whose answers name nothing secret ('unsealed')", async () => {
  const plain = new AnsweredRequests('a', 'unsealed');
  expect(await plain.record(db, 'p1', 'h1', { id: 'wo_1', name: 'Cold' })).toBe(true);
  expect(await plain.find(db, 'p1')).toEqual({ request_hash: 'h1', answer: { id: 'wo_1', name: 'Cold' } });
  const stored = await db.query<{ answer_sealed: string }>(`SELECT answer_sealed FROM a.answered_requests WHERE key = 'p1'`);
  expect(JSON.parse(stored.rows[0]!.answer_sealed)).toEqual({ id: 'wo_1', name: 'Cold' });
});

it('holds a key for an effect outside the database with a claim: no answer until filled, freed on failure, taken over after its lease (review)', async () => {
  const c1 = await answered.claim(db, 'c1', 'h1');
  expect(c1).toEqual(expect.any(String));
  // Another try meanwhile: the key is held, nothing to replay yet.
  expect(await answered.claim(db, 'c1', 'h1')).toBeUndefined();
  expect(await answered.find(db, 'c1')).toEqual({ request_hash: 'h1' });
  await answered.fill(db, 'c1', c1!, { delivered: true });
  expect(await answered.find(db, 'c1')).toEqual({ request_hash: 'h1', answer: { delivered: true } });
  expect(await answered.claim(db, 'c1', 'h1')).toBeUndefined();

  // An effect that failed frees its key; a filled answer is never released.
  const c2 = await answered.claim(db, 'c2', 'h1');
  await answered.release(db, 'c2', c2!);
  expect(await answered.find(db, 'c2')).toBeUndefined();
  await answered.release(db, 'c1', c1!);
  expect((await answered.find(db, 'c1'))?.answer).toEqual({ delivered: true });

  // A claim its process left behind (it died mid-effect) holds the key until its lease ends; the try that
  // takes it over then owns it: the late first try can neither fill nor free it (second review).
  const first = await answered.claim(db, 'c3', 'h1');
  await db.query(`UPDATE a.answered_requests SET created_at = now() - interval '11 minutes' WHERE key = 'c3'`);
  expect(await answered.find(db, 'c3')).toBeUndefined();
  const second = await answered.claim(db, 'c3', 'h1');
  expect(second).toEqual(expect.any(String));
  expect(second).not.toBe(first);
  await answered.fill(db, 'c3', first!, { delivered: 'first' });
  await answered.release(db, 'c3', first!);
  expect(await answered.find(db, 'c3')).toEqual({ request_hash: 'h1' });
  await answered.fill(db, 'c3', second!, { delivered: 'second' });
  expect((await answered.find(db, 'c3'))?.answer).toEqual({ delivered: 'second' });
});

it('an answer sealed with a key no longer configured is a 409 to replay, never a 500 nor a second run (review)', async () => {
  const before = new AnsweredRequests('a', new SecretBox('33'.repeat(32)));
  expect(await before.record(db, 'r1', 'h1', { id: 'sub_1' })).toBe(true);
  await expect(answered.find(db, 'r1')).rejects.toMatchObject({ kind: 'conflict', message: expect.stringContaining('can no longer be replayed') });
});

it('refuses to wrap a route that carries no Idempotency-Key (PUT, DELETE) (review)', () => {
  expect(() => answerOnce(answered, db, 'plans.update', async () => Promise.reject(new Error('never')))).toThrow(/carries no Idempotency-Key/);
  expect(() => answerOnce(answered, db, 'plans.create', async () => Promise.reject(new Error('never')))).not.toThrow();
});
