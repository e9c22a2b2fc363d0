import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretBox } from '@sb/runtime';
import { call, client, until } from './support/http.js';
import { startSmtpServer } from './support/smtp-server.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * Owner writes of the notifier and of payments whose answer was lost on the bus: the service frozen with
 * SIGSTOP until the gateway answers 503, then let go. Found from outside: it then made the change nobody
 * was told about (an endpoint whose secret was never shown), and a retry without the key made a second.
 * A request its caller gave up on is not made (withCallerDeadline): the retry makes it once. A route with
 * a wait of its own (a test message) may still finish after the 503: the retry with the same
 * Idempotency-Key and body answers what that first try did, never does it again.
 */
let stack: Stack;
let admin: ReturnType<typeof client>;
let smtp: Awaited<ReturnType<typeof startSmtpServer>>;
let receiver: Server;
let receiverUrl: string;
/** Recipients the mail server refuses for good (550), as a mailbox that does not exist. */
const refused = new Set<string>();
const BUS_TIMEOUT_MS = 2000;
const ZPUB = 'zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1ADqtfSdVCToUG868RvUUkgDKf31mGDtKsAYz2oz2AGutZYs';

beforeAll(async () => {
  receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200).end('ok'));
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  smtp = await startSmtpServer('mailer', 'mail-pass', { rejectRcpt: (a) => refused.has(a) });
  stack = await startStack({
    wallets: 1,
    env: {
      BUS_TIMEOUT_MS: String(BUS_TIMEOUT_MS),
      SMTP_URL: smtp.url,
      MAIL_FROM: 'Billing <billing@example.com>',
      WEBHOOK_ALLOW_PRIVATE: '1',
      NOTIFIER_POLL_INTERVAL_MS: '150',
    },
  });
  admin = client(stack.api, stack.wallets[0]!.admin_key);
});
afterAll(async () => {
  stack?.services.notifier.child.kill('SIGCONT');
  stack?.services.payments.child.kill('SIGCONT');
  await stack?.stop();
  await smtp?.stop();
  await new Promise<void>((r) => (receiver ? receiver.close(() => r()) : r()));
});

const keyed = (key: string) => ({ headers: { 'Idempotency-Key': key } });
const rows = async (sql: string, params: unknown[] = []) => (await stack.db.query(sql, params)).rows;
const walletId = () => stack.wallets[0]!.id;

/** Requests sent while `service` is frozen: the gateway gives up on each (503), the service handles them after. */
async function lostAnswers(service: 'notifier' | 'payments', ...sends: (() => Promise<{ status: number; body: any }>)[]) {
  const child = stack.services[service].child;
  child.kill('SIGSTOP');
  const answers: { status: number; body: any }[] = [];
  try {
    // The gateway frees the key after each 503, so every try reaches the service.
    for (const send of sends) answers.push(await send());
  } finally {
    child.kill('SIGCONT');
  }
  expect(
    answers.map((a) => a.status),
    JSON.stringify(answers.map((a) => a.body)),
  ).toEqual(sends.map(() => 503));
}

/** The retry, once the gateway no longer holds the key for a try of it. */
const retry = (send: () => Promise<{ status: number; body: any }>) =>
  until(send, (r) => !((r.status === 409 || r.status === 503) && /in progress/.test(r.body.detail)));

describe('a notifier write whose answer was lost', () => {
  it('POST /webhook-endpoints: the retry answers the endpoint made, without its secret; one endpoint', async () => {
    const body = { url: `${receiverUrl}/made-once`, description: 'lost answer' };
    const create = () => admin.post('/webhook-endpoints', body, keyed('endpoint-1'));
    await lostAnswers('notifier', create);
    const endpoints = () => rows(`SELECT id FROM notifier.endpoints WHERE wallet_id = $1 AND url = $2`, [walletId(), body.url]);
    await until(
      () => admin.get('/webhook-endpoints'),
      (r) => r.status === 200,
    );
    expect(await endpoints()).toHaveLength(0);
    const again = await retry(create);
    expect(again.status, JSON.stringify(again.body)).toBe(201);
    // Made by the retry: its secret shown once, to the owner who asked.
    const { secret, ...shown } = again.body;
    expect(shown).toEqual({ id: expect.any(String), url: body.url, events: null, plan_id: null, description: 'lost answer', created_at: expect.any(Number) });
    expect(secret).toEqual(expect.any(String));
    expect(await endpoints()).toEqual([{ id: again.body.id }]);
    // From then on the gateway replays it, without the secret.
    const replay = await create();
    expect(replay.status).toBe(201);
    expect(replay.body).toEqual(shown);
    // What the notifier keeps of the answer never holds the secret it showed.
    const kept = await rows(`SELECT answer_sealed FROM notifier.answered_requests`);
    const opened = kept.map((r) => JSON.parse(new SecretBox(stack.env.SECRETS_KEY!).open(r.answer_sealed)));
    expect(opened.find((a) => a.id === again.body.id)).toEqual(shown);
  });

  it('POST .../deliveries/{id}/replay: the retry answers the replay made; one replay is sent', async () => {
    const endpoint = (await admin.post('/webhook-endpoints', { url: `${receiverUrl}/replays` })).body as { id: string };
    const plan = (await admin.post('/plans', { name: 'Replayed', amount_sats: 1000, interval: 'weekly', trial_days: 7 })).body as { id: string };
    const sub = await call(stack.api, 'POST', '/public/subscribe', { body: { plan_id: plan.id, payment_method: 'lightning', email: 'replay@example.com' } });
    expect(sub.status).toBe(201);
    const [original] = await until(
      () => rows(`SELECT id FROM notifier.deliveries WHERE endpoint_id = $1 AND replay_of IS NULL`, [endpoint.id]),
      (r) => r.length > 0,
    );
    const replay = () => admin.post(`/webhook-endpoints/${endpoint.id}/deliveries/${original.id}/replay`, undefined, keyed('replay-1'));
    await lostAnswers('notifier', replay);
    const replays = () => rows(`SELECT id FROM notifier.deliveries WHERE replay_of = $1`, [original.id]);
    await until(
      () => admin.get('/webhook-endpoints'),
      (r) => r.status === 200,
    );
    expect(await replays()).toHaveLength(0);
    const again = await retry(replay);
    expect(again.status, JSON.stringify(again.body)).toBe(201);
    expect(again.body).toMatchObject({ id: expect.any(String), replay_of: original.id });
    expect(await replays()).toEqual([{ id: again.body.id }]);
  });

  it('POST /notification-settings/test: two lost tries and the retry send one message, and answer it', async () => {
    const put = await admin.put('/notification-settings', { channels: { email: { owner_email: 'owner@example.com' } } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const tests = () => smtp.mails.filter((m) => m.subject === 'Test notification' && m.to.includes('owner@example.com'));
    const before = tests().length;
    const send = () => admin.post('/notification-settings/test', { channel: 'email' }, keyed('test-1'));
    // Both tries reach the notifier at once when it goes on: the second finds the first's claim. Each is
    // a 503 only after the route's whole 45 s wait: a stopped notifier sends no working signals.
    await lostAnswers('notifier', send, send);
    const again = await retry(send);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body).toEqual({ channel: 'email', to: 'owner@example.com', delivered: true, error: null });
    expect(tests()).toHaveLength(before + 1);
  }, 240_000);

  it('POST /notifications/{id}/retry: the retry answers the notification retried, not 409', async () => {
    refused.add('gone@example.com');
    const plan = (await admin.post('/plans', { name: 'Refused', amount_sats: 1000, interval: 'weekly', trial_days: 7 })).body as { id: string };
    const sub = await call(stack.api, 'POST', '/public/subscribe', { body: { plan_id: plan.id, payment_method: 'lightning', email: 'gone@example.com' } });
    expect(sub.status).toBe(201);
    const failed = await until(
      () => rows(`SELECT id FROM notifier.notifications WHERE wallet_id = $1 AND recipient = 'gone@example.com' AND status = 'failed'`, [walletId()]),
      (r) => r.length > 0,
    );
    expect(failed.length).toBeGreaterThan(0);
    const id = failed[0].id as string;
    // The mailbox exists now: the notification retried is delivered.
    refused.delete('gone@example.com');
    const retried = () => admin.post(`/notifications/${id}/retry`, undefined, keyed('retry-1'));
    await lostAnswers('notifier', retried);
    await until(
      () => admin.get('/webhook-endpoints'),
      (r) => r.status === 200,
    );
    expect((await rows(`SELECT status FROM notifier.notifications WHERE id = $1`, [id]))[0].status).toBe('failed');
    const again = await retry(retried);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body).toMatchObject({ id, status: 'pending', recipient: 'gone@example.com' });
    const sent = await until(
      () => rows(`SELECT status, attempt_count FROM notifier.notifications WHERE id = $1`, [id]),
      (r) => r[0]?.status === 'delivered',
    );
    expect(sent[0]).toEqual({ status: 'delivered', attempt_count: 2 });
  });
});

describe('a payments write whose answer was lost', () => {
  it('POST /watchonly-wallets: the retry answers the wallet made (201), not 409 "already registered"', async () => {
    const register = () => admin.post('/watchonly-wallets', { name: 'Cold', xpub: ZPUB }, keyed('watchonly-1'));
    await lostAnswers('payments', register);
    const wallets = () => rows(`SELECT id FROM payments.watchonly_wallets WHERE wallet_id = $1`, [walletId()]);
    await until(
      () => admin.get('/watchonly-wallets'),
      (r) => r.status === 200,
    );
    expect(await wallets()).toHaveLength(0);
    const again = await retry(register);
    expect(again.status, JSON.stringify(again.body)).toBe(201);
    expect(again.body).toMatchObject({ id: expect.any(String), name: 'Cold', key_type: 'zpub', network: 'mainnet' });
    expect(await wallets()).toEqual([{ id: again.body.id }]);
    // Kept unsealed (payments has no SECRETS_KEY): what GET shows, never the key.
    const kept = await rows(`SELECT answer_sealed FROM payments.answered_requests`);
    expect(kept.map((r) => JSON.parse(r.answer_sealed))).toEqual([again.body]);
    expect(JSON.stringify(kept)).not.toContain(ZPUB);
    // Another key for the same extended key is still refused.
    const other = await admin.post('/watchonly-wallets', { name: 'Cold', xpub: ZPUB }, keyed('watchonly-2'));
    expect(other.status).toBe(409);
  });
});
