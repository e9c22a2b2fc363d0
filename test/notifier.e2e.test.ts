import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventSchema, WebhookEvent } from '@sb/contracts';
import { SecretBox } from '@sb/runtime';
import { startService } from '../scripts/stack.mjs';
import { client, until } from './support/http.js';
import { startSmtpServer, type Mail } from './support/smtp-server.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * Outgoing webhooks and subscriber e-mail through the whole system: events emitted by billing reach a
 * local HTTP receiver that verifies every Standard Webhooks signature, and a local SMTP server.
 */

interface Hit {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  verified: boolean;
  at: number;
}

let stack: Stack;
let db: Stack['db'];
let receiver: Server;
let receiverUrl: string;
let smtp: Awaited<ReturnType<typeof startSmtpServer>>;
const hits: Hit[] = [];
let mails: Mail[] = [];
/** Per receiver path: the statuses to answer, in order; then 200. */
const scripts: Record<string, number[]> = {};
/** Receiver paths whose requests get no answer (yet): the sender waits, as on a slow receiver. */
const holding = new Set<string>();
const secrets: Record<string, string> = {};
/** Per receiver path: when a request was first closed without an answer (the sender gave up on it). */
const firstAbandoned: Record<string, number> = {};

function startReceiver(): Promise<void> {
  receiver = createServer((req, res) => {
    const at = req.url ?? '/';
    res.on('close', () => {
      if (!res.writableFinished) firstAbandoned[at] ??= performance.now();
    });
    let body = '';
    req.setEncoding('utf8');
    // A notifier killed with a delivery held open resets its connection: that is the test, not a failure.
    req.on('error', () => undefined);
    res.on('error', () => undefined);
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      const path = req.url ?? '/';
      let verified = false;
      try {
        new Webhook(secrets[path] ?? 'whsec_AAAA').verify(body, req.headers as Record<string, string>);
        verified = true;
      } catch {
        /* recorded as unverified */
      }
      hits.push({ path, headers: req.headers, body, verified, at: performance.now() });
      if (holding.has(path)) return;
      const status = scripts[path]?.shift() ?? (path.startsWith('/dead') ? 503 : verified ? 200 : 400);
      res.writeHead(status, { 'content-type': 'text/plain' }).end(status === 200 ? 'ok' : `nope ${status}`);
    });
  });
  return new Promise((r) =>
    receiver.listen(0, '127.0.0.1', () => {
      receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
      r();
    }),
  );
}

beforeAll(async () => {
  await startReceiver();
  smtp = await startSmtpServer('mailer', 'mail-pass');
  mails = smtp.mails;
  stack = await startStack({
    wallets: 2,
    env: {
      WEBHOOK_ALLOW_PRIVATE: '1',
      SMTP_URL: smtp.url,
      MAIL_FROM: 'Billing <billing@example.com>',
      NOTIFIER_POLL_INTERVAL_MS: '150',
      WEBHOOK_TIMEOUT_MS: '3000',
    },
  });
  db = stack.db;
});
afterAll(async () => {
  await stack?.stop();
  await new Promise<void>((r) => (receiver ? receiver.close(() => r()) : r()));
  await smtp?.stop();
});

const admin = () => client(stack.api, stack.wallets[0]!.admin_key);
const reader = () => client(stack.api, stack.wallets[0]!.invoice_key);
const rows = async (sql: string, params: unknown[] = []) => (await db.query(sql, params)).rows;

async function register(path: string, extra: Record<string, unknown> = {}) {
  const res = await admin().post('/webhook-endpoints', { url: `${receiverUrl}${path}`, ...extra });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  secrets[path] = res.body.secret;
  return res.body as { id: string; secret: string; url: string };
}

async function plan(name: string, trialDays = 7) {
  const res = await admin().post('/plans', { name, amount_sats: 1000, interval: 'weekly', trial_days: trialDays });
  expect(res.status).toBe(201);
  return res.body as { id: string };
}

async function subscribe(planId: string, email: string): Promise<string> {
  const res = await client(stack.api).post('/public/subscribe', { plan_id: planId, payment_method: 'lightning', email });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.subscription_id;
}

async function eventId(event: string, subscriptionId: string): Promise<string> {
  const found = await until(
    () => rows(`SELECT event_id FROM billing.outbox WHERE payload->>'event' = $1 AND payload->'data'->>'subscription_id' = $2`, [event, subscriptionId]),
    (r) => r.length > 0,
  );
  expect(found).toHaveLength(1);
  return found[0].event_id;
}

const hitsFor = (path: string, id: string) => hits.filter((h) => h.path === path && h.headers['webhook-id'] === id);
const attemptsOf = (deliveryId: string) =>
  rows('SELECT status_code, error, attempted_at, duration_ms FROM notifier.delivery_attempts WHERE delivery_id = $1 ORDER BY id', [deliveryId]);
const deliveryOf = async (endpointId: string, evt: string) =>
  (await rows('SELECT * FROM notifier.deliveries WHERE endpoint_id = $1 AND event_id = $2 AND replay_of IS NULL', [endpointId, evt]))[0];
const advance = async (seconds: number) => expect((await admin().post('/dev/clock', { advance_seconds: seconds })).status).toBe(200);

let all: { id: string };
let cancelledOnly: { id: string };
let planBOnly: { id: string };
let subA: string;
let createdA: string;

describe('owner webhook endpoints', () => {
  it('registration shows the secret once; it is stored sealed; reads never show it; bad input is 422, invoice key 403', async () => {
    all = await register('/all', { description: 'everything' });
    expect(all.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    expect(Buffer.from(all.secret.slice(6), 'base64')).toHaveLength(24);

    const one = await reader().get(`/webhook-endpoints/${all.id}`);
    expect(one.status).toBe(200);
    expect(one.body).toEqual({ id: all.id, url: `${receiverUrl}/all`, events: null, plan_id: null, description: 'everything', created_at: expect.any(Number) });
    const list = await reader().get('/webhook-endpoints?limit=1');
    expect(list.status).toBe(200);
    expect(list.body).toMatchObject({ total: 1, limit: 1, offset: 0 });
    expect(JSON.stringify(list.body)).not.toContain(all.secret.slice(6));
    expect((await reader().get('/webhook-endpoints?limit=0')).status).toBe(422);

    const [stored] = await rows('SELECT secret_sealed FROM notifier.endpoints WHERE id = $1', [all.id]);
    expect(stored.secret_sealed).not.toContain(all.secret.slice(6));
    expect(new SecretBox(stack.env.SECRETS_KEY!).open(stored.secret_sealed)).toBe(all.secret);

    expect((await reader().post('/webhook-endpoints', { url: `${receiverUrl}/x` })).status).toBe(403);
    const ftp = await admin().post('/webhook-endpoints', { url: 'ftp://example.com/hook' });
    expect(ftp.status).toBe(422);
    expect(ftp.body.detail[0].loc).toEqual(['body', 'url']);
    // Found from outside: a URL too long was said not to be a URL.
    const long = await admin().post('/webhook-endpoints', { url: `https://example.com/${'x'.repeat(2000)}` });
    expect(long.status).toBe(422);
    expect(long.body.detail).toEqual([{ loc: ['body', 'url'], msg: 'must be at most 2000 characters', type: 'too_big' }]);
    expect((await admin().post('/webhook-endpoints', { url: `${receiverUrl}/x`, events: ['no.such_event'] })).status).toBe(422);
    expect((await admin().post('/webhook-endpoints', { url: `${receiverUrl}/x`, secret: 'mine' })).status).toBe(422);
    // Found from outside: a password in the URL was stored and shown in clear, to the invoice key too.
    const count = async () => (await rows('SELECT count(*)::int AS n FROM notifier.endpoints')).at(0).n;
    const before = await count();
    for (const url of [`${receiverUrl.replace('://', '://user:pw@')}/x`, `${receiverUrl.replace('://', '://token@')}/x`]) {
      const creds = await admin().post('/webhook-endpoints', { url });
      expect(creds.status, url).toBe(422);
      expect(creds.body.detail[0]).toMatchObject({ loc: ['body', 'url'], msg: expect.stringContaining('credentials') });
    }
    expect(await count()).toBe(before);
    // One stored before they were refused is shown without them (and still delivered to as stored).
    const old = await admin().post('/webhook-endpoints', { url: `${receiverUrl}/old-creds` });
    await db.query('UPDATE notifier.endpoints SET url = $2 WHERE id = $1', [old.body.id, `${receiverUrl.replace('://', '://user:pw@')}/old-creds`]);
    expect((await reader().get(`/webhook-endpoints/${old.body.id}`)).body.url).toBe(`${receiverUrl.replace('://', '://***@')}/old-creds`);
    expect(JSON.stringify((await reader().get('/webhook-endpoints')).body)).not.toContain('user:pw');
    expect((await admin().del(`/webhook-endpoints/${old.body.id}`)).status).toBe(200);

    // With an Idempotency-Key the secret is still shown once: a replay answers the endpoint without it,
    // and the gateway's replay store never holds it.
    const body = { url: `${receiverUrl}/idem`, description: 'idempotent' };
    const first = await admin().post('/webhook-endpoints', body, { headers: { 'Idempotency-Key': 'wh-create-1' } });
    expect(first.status).toBe(201);
    expect(first.body.secret).toMatch(/^whsec_/);
    const again = await admin().post('/webhook-endpoints', body, { headers: { 'Idempotency-Key': 'wh-create-1' } });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.id).toBe(first.body.id);
    expect(again.body).not.toHaveProperty('secret');
    const kept = await rows('SELECT response_body::text AS b FROM gateway.idempotency_keys WHERE key = $1', ['wh-create-1']);
    expect(kept).toHaveLength(1);
    expect(kept[0].b).not.toContain(first.body.secret.slice(6));
    expect((await admin().del(`/webhook-endpoints/${first.body.id}`)).status).toBe(200); // out of the later tests' way
  });

  it('a subscription reaches the endpoint signed and verifiable, webhook-id = event id; event and plan filters hold', async () => {
    const planA = await plan('Plan A');
    const planB = await plan('Plan B');
    cancelledOnly = await register('/cancelled-only', { events: ['subscription.cancelled'] });
    planBOnly = await register('/plan-b', { plan_id: planB.id });

    subA = await subscribe(planA.id, 'alice@example.com');
    createdA = await eventId('subscription.created', subA);
    const got = await until(
      async () => hitsFor('/all', createdA),
      (h) => h.length > 0,
    );
    expect(got).toHaveLength(1);
    expect(got[0]!.verified).toBe(true);
    const body = JSON.parse(got[0]!.body);
    expect(Object.keys(body).sort()).toEqual(['data', 'event', 'timestamp']);
    expect(body).toMatchObject({ event: 'subscription.created', data: { subscription_id: subA, plan_id: planA.id, subscriber_email: 'alice@example.com' } });
    // Forged: the receiver's check really depends on the secret.
    expect(() => new Webhook(cancelledOnly.secret).verify(got[0]!.body, got[0]!.headers as Record<string, string>)).toThrow();

    const delivered = await until(
      async () => (await reader().get(`/webhook-endpoints/${all.id}/deliveries`)).body,
      (b) => b.items?.[0]?.status === 'delivered',
    );
    expect(delivered.items[0]).toMatchObject({
      event_id: createdA,
      event: 'subscription.created',
      attempt_count: 1,
      status: 'delivered',
      last_status_code: 200,
      last_error: null,
      next_attempt_at: null,
    });

    const subB = await subscribe(planB.id, 'bob@example.com');
    const createdB = await eventId('subscription.created', subB);
    await until(
      async () => hitsFor('/plan-b', createdB),
      (h) => h.length > 0,
    );
    expect(
      await admin()
        // A note that reads like the service's words: the owner cancelled all the same (found from outside).
        .post(`/subscriptions/${subA}/cancel`, { immediate: true, reason: 'cancelled by subscriber' })
        .then((r) => r.status),
    ).toBe(200);
    const cancelA = await eventId('subscription.cancelled', subA);
    const cancelHit = await until(
      async () => hitsFor('/cancelled-only', cancelA),
      (h) => h.length > 0,
    );
    expect(JSON.parse(cancelHit[0]!.body).data).toMatchObject({ status: 'cancelled', cancelled_by: 'merchant', cancel_reason: 'cancelled by subscriber' });

    // Each event's deliveries are recorded together: exactly the endpoints whose filters match.
    const endpointsOf = async (evt: string) =>
      (await rows('SELECT endpoint_id FROM notifier.deliveries WHERE event_id = $1 ORDER BY endpoint_id', [evt])).map((r) => r.endpoint_id);
    expect(await endpointsOf(createdA)).toEqual([all.id]);
    expect(await endpointsOf(createdB)).toEqual([all.id, planBOnly.id].sort());
    expect(await endpointsOf(cancelA)).toEqual([all.id, cancelledOnly.id].sort());
    expect(hits.filter((h) => h.path === '/plan-b').every((h) => JSON.parse(h.body).data.plan_id === planB.id)).toBe(true);
    expect(hits.filter((h) => h.path === '/cancelled-only').every((h) => JSON.parse(h.body).event === 'subscription.cancelled')).toBe(true);
    expect(hits.every((h) => h.verified)).toBe(true);
  });

  it('a receiver answering 500 twice then 200: three attempts logged, delivered (dev clock moved past the backoff)', async () => {
    const p = await plan('Flaky plan');
    const ep = await register('/flaky', { plan_id: p.id, events: ['subscription.created'] });
    scripts['/flaky'] = [500, 500];
    const sub = await subscribe(p.id, 'flaky@example.com');
    const evt = await eventId('subscription.created', sub);
    const first = await until(
      () => deliveryOf(ep.id, evt),
      (d) => d?.attempt_count === 1 && d.next_attempt_at !== null && d.next_attempt_at - d.first_attempt_at < 60,
    );
    expect(first).toMatchObject({ status: 'pending', last_status_code: 500 });
    expect(first.next_attempt_at - first.first_attempt_at).toBe(30);
    // Nothing is retried before its time.
    await new Promise((r) => setTimeout(r, 600));
    expect(await attemptsOf(first.id)).toHaveLength(1);

    await advance(60);
    const second = await until(
      () => deliveryOf(ep.id, evt),
      (d) => d.attempt_count === 2 && d.next_attempt_at - d.first_attempt_at < 600,
    );
    expect(second.status).toBe('pending');
    await advance(180);
    const third = await until(
      () => deliveryOf(ep.id, evt),
      (d) => d.status === 'delivered',
    );
    expect(third).toMatchObject({ attempt_count: 3, last_status_code: 200, next_attempt_at: null });
    const attempts = await attemptsOf(first.id);
    expect(attempts.map((a) => a.status_code)).toEqual([500, 500, 200]);
    expect(attempts[0].error).toBe('HTTP 500: nope 500');
    expect(attempts[2].error).toBeNull();
    expect(attempts.every((a) => Number.isInteger(a.duration_ms) && a.duration_ms >= 0)).toBe(true);
    // The owner sees the same attempts on the delivery.
    const listed = (await reader().get(`/webhook-endpoints/${ep.id}/deliveries`)).body.items.find((x: { id: string }) => x.id === first.id);
    expect(listed.attempts).toEqual(
      attempts.map((a) => ({ attempted_at: Number(a.attempted_at), status_code: a.status_code, error: a.error, duration_ms: a.duration_ms })),
    );
    const received = hitsFor('/flaky', evt);
    expect(received).toHaveLength(3);
    expect(received.every((h) => h.verified)).toBe(true);
  });

  it('a receiver always failing: retried from durable storage until 3 days after the first attempt, then failed', async () => {
    const p = await plan('Dead plan');
    const ep = await register('/dead', { plan_id: p.id, events: ['subscription.created'] });
    const sub = await subscribe(p.id, 'dead@example.com');
    const evt = await eventId('subscription.created', sub);
    let d = await until(
      () => deliveryOf(ep.id, evt),
      (x) => x?.attempt_count === 1 && x.next_attempt_at - x.first_attempt_at < 60,
    );
    for (let day = 0; day < 5 && d.status === 'pending'; day++) {
      const before: number = d.attempt_count;
      await advance(86_400);
      d = await until(
        () => deliveryOf(ep.id, evt),
        (x) => x.attempt_count > before,
      );
    }
    expect(d.status).toBe('failed');
    expect(d.next_attempt_at).toBeNull();
    expect(d.last_status_code).toBe(503);
    const attempts = await attemptsOf(d.id);
    expect(attempts.length).toBe(d.attempt_count);
    expect(attempts.at(-1)!.attempted_at - attempts[0]!.attempted_at).toBeGreaterThanOrEqual(3 * 86_400);
    // One more day: a failed delivery is not tried again.
    await advance(86_400);
    await new Promise((r) => setTimeout(r, 800));
    expect(await attemptsOf(d.id)).toHaveLength(attempts.length);
    expect((await reader().get(`/webhook-endpoints/${ep.id}/deliveries`)).body.items[0]).toMatchObject({
      status: 'failed',
      attempt_count: attempts.length,
      last_status_code: 503,
    });
  });

  it('metrics count the attempts by outcome, and the outbox backlog is on every service (found from outside: none)', async () => {
    const text = await (await fetch(`${stack.services.notifier.url}/metrics`)).text();
    const count = (outcome: string) => Number(text.match(new RegExp(`^webhook_attempts_total\\{[^}]*outcome="${outcome}"[^}]*\\} (\\d+)`, 'm'))?.[1] ?? 0);
    // The tests above delivered, retried (500 twice) and gave up (a receiver always failing).
    expect(count('delivered')).toBeGreaterThan(0);
    expect(count('retried')).toBeGreaterThan(0);
    expect(count('failed')).toBeGreaterThan(0);
    expect(text).toMatch(/^# TYPE notification_attempts_total counter$/m);
    for (const url of [stack.services.billing.url, stack.services.payments.url, stack.services.notifier.url]) {
      const m = await (await fetch(`${url}/metrics`)).text();
      expect(m, url).toMatch(/^outbox_unpublished_events\{service="\w+"\} \d+$/m);
      expect(m, url).toMatch(/^outbox_oldest_unpublished_seconds\{service="\w+"\} [\d.e+-]+$/m);
    }
  });

  it("a deleted endpoint's deliveries stay listed to its wallet, the pending one stopped (found from outside: 404)", async () => {
    const p = await plan('Dropped plan');
    const ep = await register('/dead-dropped', { plan_id: p.id, events: ['subscription.created'] });
    const evt = await eventId('subscription.created', await subscribe(p.id, 'dropped@example.com'));
    const tried = await until(
      () => deliveryOf(ep.id, evt),
      (x) => x?.attempt_count === 1 && x.status === 'pending',
    );
    expect((await admin().del(`/webhook-endpoints/${ep.id}`)).status).toBe(200);
    const res = await reader().get(`/webhook-endpoints/${ep.id}/deliveries`);
    expect(res.status).toBe(200);
    expect(res.body.total).toBe(1);
    expect(res.body.items[0]).toMatchObject({ id: tried.id, event_id: evt, status: 'failed', last_error: 'endpoint deleted', next_attempt_at: null });
    expect(res.body.items[0].attempts).toEqual([expect.objectContaining({ status_code: 503 })]);
    // The endpoint itself is gone, and nothing is sent to it again.
    expect((await reader().get(`/webhook-endpoints/${ep.id}`)).status).toBe(404);
    expect((await admin().post(`/webhook-endpoints/${ep.id}/deliveries/${tried.id}/replay`)).status).toBe(404);
    expect((await client(stack.api, stack.wallets[1]!.admin_key).get(`/webhook-endpoints/${ep.id}/deliveries`)).status).toBe(404);
    await advance(3600);
    await new Promise((r) => setTimeout(r, 600));
    expect(await attemptsOf(tried.id)).toHaveLength(1);
  });

  it('replay sends the same event again as a new delivery with the same webhook-id', async () => {
    const original = await deliveryOf(all.id, createdA);
    const before = hitsFor('/all', createdA).length;
    const res = await admin().post(`/webhook-endpoints/${all.id}/deliveries/${original.id}/replay`);
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ event_id: createdA, event: 'subscription.created', replay_of: original.id, status: 'pending', attempt_count: 0 });
    expect(res.body.id).not.toBe(original.id);
    const got = await until(
      async () => hitsFor('/all', createdA),
      (h) => h.length > before,
    );
    expect(got).toHaveLength(before + 1);
    expect(got.at(-1)!.body).toBe(got[0]!.body);
    expect(got.at(-1)!.verified).toBe(true);
    const list = await until(
      async () => (await reader().get(`/webhook-endpoints/${all.id}/deliveries?limit=200`)).body,
      (b) => b.items.find((i: { id: string }) => i.id === res.body.id)?.status === 'delivered',
    );
    expect(list.items[0].id).toBe(res.body.id); // newest first
    expect((await reader().post(`/webhook-endpoints/${all.id}/deliveries/${original.id}/replay`)).status).toBe(403);
    expect((await admin().post(`/webhook-endpoints/${all.id}/deliveries/whd_nope/replay`)).status).toBe(404);
  });

  it("a plan archived with no subscriptions: its one plan.archived reaches webhooks with the WebhookEvent's subscription_id, '' (found from outside: missing)", async () => {
    const archives = await register('/archives', { events: ['plan.archived'] });
    const empty = await plan('Nobody subscribed');
    expect((await admin().del(`/plans/${empty.id}`)).status).toBe(200);
    const bodies = async () =>
      hits.filter((h) => h.path === '/archives').map((h) => ({ id: h.headers['webhook-id'], verified: h.verified, body: JSON.parse(h.body) }));
    const [got] = await until(
      async () => (await bodies()).filter((b) => b.body.data.plan_id === empty.id),
      (b) => b.length > 0,
    );
    expect(got!.verified).toBe(true);
    expect(got!.body).toMatchObject({
      event: 'plan.archived',
      data: { subscription_id: '', plan_id: empty.id, status: 'archived', cancelled_subscriptions: 0 },
    });
    expect(WebhookEvent.safeParse(got!.body).success).toBe(true);
    expect(eventSchema('plan.archived').safeParse(got!.body).success).toBe(true);

    // Any such event on the stream (here one of no plan of ours, put there by hand) is sent with it.
    const nc: NatsConnection = await connect({ servers: stack.natsUrl, ...stack.natsOperator });
    const old = { id: `evt_old${Date.now()}`, event: 'plan.archived', wallet_id: stack.wallets[0]!.id, timestamp: Math.floor(Date.now() / 1000) };
    try {
      const data = { plan_id: 'plan_gone', plan_name: 'Gone', status: 'archived', cancelled_subscriptions: 0 };
      await jetstream(nc).publish('events.plan.archived', JSON.stringify({ ...old, data }), { msgID: old.id });
    } finally {
      await nc.close();
    }
    const [before] = await until(
      async () => (await bodies()).filter((b) => b.id === old.id),
      (b) => b.length > 0,
    );
    expect(before!.body.data).toEqual({ subscription_id: '', plan_id: 'plan_gone', plan_name: 'Gone', status: 'archived', cancelled_subscriptions: 0 });
    expect(WebhookEvent.safeParse(before!.body).success).toBe(true);
    expect((await admin().del(`/webhook-endpoints/${archives.id}`)).status).toBe(200);
  });

  it("a payment's webhooks name who paid, as the subscription's do (found from outside: payment.received without the subscriber)", async () => {
    const payments = await register('/payments', { events: ['payment.received'] });
    const p = await plan('Paid by Frank', 0);
    const res = await client(stack.api).post('/public/subscribe', {
      plan_id: p.id,
      payment_method: 'lightning',
      email: 'frank@example.com',
      name: 'Frank Payer',
    });
    expect(res.status).toBe(201);
    expect((await client(stack.api).post(`/dev/payments/${res.body.payment_id}/pay`)).status).toBe(200);
    const [hit] = await until(
      async () => hits.filter((h) => h.path === '/payments' && JSON.parse(h.body).data.payment_id === res.body.payment_id),
      (h) => h.length > 0,
    );
    expect(hit!.verified).toBe(true);
    const body = JSON.parse(hit!.body);
    expect(body).toMatchObject({
      event: 'payment.received',
      data: { subscription_id: res.body.subscription_id, plan_id: p.id, status: 'paid', subscriber_email: 'frank@example.com', subscriber_name: 'Frank Payer' },
    });
    // Names only: nothing else of the contact (the portal link holds the subscriber's token).
    expect(hit!.body).not.toContain('token=');
    // The event itself, as payments wrote it, does not know them.
    const [written] = await rows(`SELECT payload FROM payments.outbox WHERE payload->>'event' = 'payment.received' AND payload->'data'->>'payment_id' = $1`, [
      res.body.payment_id,
    ]);
    expect(written.payload.data).not.toHaveProperty('subscriber_email');

    // With billing hung, the names are a courtesy the webhook goes without, after a short wait in all.
    const q = await plan('Paid while billing is hung', 0);
    const other = await client(stack.api).post('/public/subscribe', { plan_id: q.id, payment_method: 'lightning', email: 'grace@example.com', name: 'Grace' });
    expect(other.status).toBe(201);
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    try {
      expect((await client(stack.api).post(`/dev/payments/${other.body.payment_id}/pay`)).status).toBe(200);
      const [unnamed] = await until(
        async () => hits.filter((h) => h.path === '/payments' && JSON.parse(h.body).data.payment_id === other.body.payment_id),
        (h) => h.length > 0,
      );
      expect(unnamed!.verified).toBe(true);
      const data = JSON.parse(unnamed!.body).data;
      expect(data).toMatchObject({ subscription_id: other.body.subscription_id, status: 'paid' });
      expect(data).not.toHaveProperty('subscriber_email');
      expect(data).not.toHaveProperty('subscriber_name');
    } finally {
      billing.kill('SIGCONT');
    }
    expect((await admin().del(`/webhook-endpoints/${payments.id}`)).status).toBe(200);
  });

  it('the EVENTS stream the services set up keeps an event EVENTS_MAX_AGE_DAYS, 30 by default: its store does not fill with years of events', async () => {
    const nc: NatsConnection = await connect({ servers: stack.natsUrl, ...stack.natsOperator });
    try {
      const { config } = await (await jetstreamManager(nc)).streams.info('EVENTS');
      expect(config.max_age).toBe(30 * 86_400 * 1e9);
    } finally {
      await nc.close();
    }
  });

  it("another wallet's endpoint is 404 everywhere; delete removes an endpoint", async () => {
    const other = client(stack.api, stack.wallets[1]!.admin_key);
    const original = await deliveryOf(all.id, createdA);
    expect((await other.get(`/webhook-endpoints/${all.id}`)).status).toBe(404);
    expect((await other.get(`/webhook-endpoints/${all.id}/deliveries`)).status).toBe(404);
    expect((await other.post(`/webhook-endpoints/${all.id}/deliveries/${original.id}/replay`)).status).toBe(404);
    expect((await other.del(`/webhook-endpoints/${all.id}`)).status).toBe(404);
    expect((await other.get('/webhook-endpoints')).body.total).toBe(0);
    expect((await reader().get(`/webhook-endpoints/${all.id}`)).status).toBe(200);

    const doomed = await register('/doomed');
    expect((await admin().del(`/webhook-endpoints/${doomed.id}`)).status).toBe(200);
    expect((await reader().get(`/webhook-endpoints/${doomed.id}`)).status).toBe(404);
    expect((await admin().del(`/webhook-endpoints/${doomed.id}`)).status).toBe(404);
  });

  it('an attempt is recorded together with its outcome or not at all: a refused delivery update leaves no attempt', async () => {
    const p = await plan('Tx plan');
    const ep = await register('/tx', { plan_id: p.id, events: ['subscription.created'] });
    // The database refuses the update of this endpoint's delivery after the send (as an outage would).
    await rows(
      `CREATE OR REPLACE FUNCTION public.refuse_delivery_finish() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
    );
    await rows(`CREATE TRIGGER refuse_delivery_finish BEFORE UPDATE ON notifier.deliveries FOR EACH ROW
      WHEN (NEW.attempt_count > OLD.attempt_count AND OLD.endpoint_id = '${ep.id}') EXECUTE FUNCTION public.refuse_delivery_finish()`);
    let evt: string;
    try {
      const sub = await subscribe(p.id, 'tx@example.com');
      evt = await eventId('subscription.created', sub);
      await until(
        async () => hitsFor('/tx', evt),
        (h) => h.length > 0,
      );
      // The worker's recording of that attempt failed on the refused update.
      await until(
        async () => stack.services.notifier.lines.filter((l) => l.includes('refused by the test')),
        (l) => l.length > 0,
      );
      const d = await deliveryOf(ep.id, evt);
      expect(d).toMatchObject({ status: 'pending', attempt_count: 0, first_attempt_at: null, last_status_code: null });
      expect(await attemptsOf(d.id)).toEqual([]);
      const listed = (await reader().get(`/webhook-endpoints/${ep.id}/deliveries`)).body.items;
      expect(listed).toEqual([expect.objectContaining({ id: d.id, status: 'pending', attempt_count: 0, attempts: [] })]);
    } finally {
      await rows(`DROP TRIGGER IF EXISTS refuse_delivery_finish ON notifier.deliveries`);
      await rows(`DROP FUNCTION IF EXISTS public.refuse_delivery_finish()`);
    }
    // The claim's lease (WEBHOOK_TIMEOUT_MS + 60 s) ends: the delivery is due again and goes through once.
    await advance(3 + 60 + 1);
    const done = await until(
      () => deliveryOf(ep.id, evt),
      (x) => x.status === 'delivered',
    );
    expect(done).toMatchObject({ attempt_count: 1, last_status_code: 200, last_error: null, next_attempt_at: null });
    const attempts = await attemptsOf(done.id);
    expect(attempts.map((a) => [a.status_code, a.error])).toEqual([[200, null]]);
    const listed = (await reader().get(`/webhook-endpoints/${ep.id}/deliveries`)).body.items;
    expect(listed).toEqual([
      expect.objectContaining({ id: done.id, status: 'delivered', attempt_count: 1, attempts: [expect.objectContaining({ status_code: 200, error: null })] }),
    ]);
    // Sent once unrecorded and once recorded, both with the same webhook-id; nothing more later.
    await advance(600);
    await new Promise((r) => setTimeout(r, 600));
    expect(hitsFor('/tx', evt)).toHaveLength(2);
    expect(await attemptsOf(done.id)).toHaveLength(1);
  });

  it('a hung notifier does not take the public plan with it: the checkout page gets it, offering e-mail (found from outside: 503)', async () => {
    const p = await plan('Hung notifier plan');
    const notifier = stack.services.notifier.child;
    notifier.kill('SIGSTOP');
    try {
      const res = await client(stack.api).get(`/public/plan/${p.id}`);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toMatchObject({ id: p.id, name: 'Hung notifier plan' });
      expect(res.body.available_contact_methods).toEqual(['email']);
    } finally {
      notifier.kill('SIGCONT');
    }
  });

  it('a hung notifier does not hold up a checkout with a contact_preference: 201 at once, the preference kept as given (found from outside: 503 after the bus timeout, the checkout made all the same)', async () => {
    const p = await plan('Hung notifier checkout', 0);
    const notifier = stack.services.notifier.child;
    notifier.kill('SIGSTOP');
    try {
      const checkout = async (email: string) => {
        const started = Date.now();
        const res = await client(stack.api).post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email, contact_preference: 'email' });
        expect(res.status, JSON.stringify(res.body)).toBe(201);
        expect(res.body.payment_request).toEqual(expect.any(String));
        return { id: res.body.subscription_id as string, ms: Date.now() - started };
      };
      // The first waits the notifier's 2 s courtesy; the next ones know it does not answer.
      const first = await checkout('hung-notifier-1@example.com');
      // Bounds by what they prove, not by speed: within the gateway's 5 s; the second not waiting the 2 s.
      expect(first.ms).toBeLessThan(5000);
      const second = await checkout('hung-notifier-2@example.com');
      expect(second.ms).toBeLessThan(2000);
      const saved = await rows(
        `SELECT s.status, r.contact_preference FROM billing.subscriptions s JOIN billing.subscribers r ON r.id = s.subscriber_id WHERE s.id = ANY($1) ORDER BY r.email`,
        [[first.id, second.id]],
      );
      expect(saved).toEqual([
        { status: 'pending', contact_preference: 'email' },
        { status: 'pending', contact_preference: 'email' },
      ]);
    } finally {
      notifier.kill('SIGCONT');
    }
  });

  it('receivers that never answer hold up their own deliveries only, and a wallet has at most 16 endpoints (found from outside: they took every place)', async () => {
    const owner = client(stack.api, stack.wallets[1]!.admin_key);
    const made: string[] = [];
    const add = async (path: string) => {
      const res = await owner.post('/webhook-endpoints', { url: `${receiverUrl}${path}`, events: ['subscription.created'] });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      secrets[path] = res.body.secret;
      made.push(res.body.id);
      return res.body.id as string;
    };
    const hung = Array.from({ length: 6 }, (_, i) => `/fair-hung-${i}`);
    for (const path of hung) holding.add(path);
    const notifier = stack.services.notifier.child;
    try {
      for (const path of hung) await add(path);
      const good = await add('/fair-good');
      const p = (await owner.post('/plans', { name: 'Fair share', amount_sats: 1000, interval: 'weekly', trial_days: 7 })).body as { id: string };
      // 40 events reach the notifier at once (it is stopped while they are made): 280 deliveries due
      // together, 240 of them to receivers that keep each request open until the sender's timeout.
      notifier.kill('SIGSTOP');
      try {
        for (let i = 0; i < 40; i++) {
          const res = await client(stack.api).post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: `fair-${i}@example.com` });
          expect(res.status).toBe(201);
        }
      } finally {
        notifier.kill('SIGCONT');
      }
      const delivered = await until(
        () => rows(`SELECT count(*)::int AS n FROM notifier.deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, [good]),
        (r) => r[0].n === 40,
      );
      expect(delivered[0].n).toBe(40);
      // Every one of the answering receiver's before the sender gave up on any request it held open.
      // Before: 100 places, most taken by those, and the rest waited for their timeout.
      const goodAt = hits.filter((h) => h.path === '/fair-good').map((h) => h.at);
      const abandoned = await until(
        async () => hung.map((path) => firstAbandoned[path]),
        (t) => t.every((x) => x !== undefined),
      );
      expect(Math.max(...goodAt)).toBeLessThan(Math.min(...(abandoned as number[])));
      // Sixteen endpoints at most: the seventeenth is refused, and deleting one makes room.
      for (let i = made.length; i < 16; i++) await add(`/fair-more-${i}`);
      const over = await owner.post('/webhook-endpoints', { url: `${receiverUrl}/fair-over` });
      expect([over.status, over.body.detail]).toEqual([409, 'A wallet can have at most 16 webhook endpoints: delete one it no longer needs first']);
      expect((await owner.del(`/webhook-endpoints/${made.pop()}`)).status).toBe(200);
      await add('/fair-room');
    } finally {
      for (const id of made) await owner.del(`/webhook-endpoints/${id}`);
      for (const path of hung) holding.delete(path);
    }
  });

  it('a notifier killed with deliveries under way: after a restart each goes out again with its webhook-id; none lost, one attempt each', async () => {
    const p = await plan('Crash plan');
    const ep = await register('/held', { plan_id: p.id, events: ['subscription.created'] });
    holding.add('/held');
    const evts: string[] = [];
    try {
      for (const who of ['c1', 'c2', 'c3']) evts.push(await eventId('subscription.created', await subscribe(p.id, `${who}@example.com`)));
      // Every one sent and waiting for its answer when the notifier dies.
      await until(
        async () => evts.map((e) => hitsFor('/held', e).length),
        (n) => n.every((x) => x === 1),
      );
      const dead = stack.services.notifier.child;
      dead.kill('SIGKILL');
      await new Promise((r) => (dead.exitCode !== null || dead.signalCode !== null ? r(undefined) : dead.once('exit', r)));
    } finally {
      holding.delete('/held');
    }
    for (const e of evts) expect(await deliveryOf(ep.id, e)).toMatchObject({ status: 'pending', attempt_count: 0 });
    await stack.restartNotifier();
    // Their claims end (WEBHOOK_TIMEOUT_MS + 60 s): due again, sent again, recorded once.
    await advance(3 + 60 + 1);
    for (const e of evts) {
      const d = await until(
        () => deliveryOf(ep.id, e),
        (x) => x.status === 'delivered',
      );
      expect(d).toMatchObject({ attempt_count: 1, last_status_code: 200 });
      expect((await attemptsOf(d.id)).map((a) => a.status_code)).toEqual([200]);
      const sent = hitsFor('/held', e);
      expect(sent).toHaveLength(2);
      expect(sent.every((h) => h.verified && h.headers['webhook-id'] === e)).toBe(true);
    }
  });
});

describe('subscriber e-mail', () => {
  const mailsTo = (to: string) => mails.filter((m) => m.to.includes(to));

  it('the cancellation and the renewal reminder (with its pay link) reach the subscriber', async () => {
    const alice = await until(
      async () => mailsTo('alice@example.com'),
      (m) => m.some((x) => x.subject.includes('cancelled')),
    );
    const cancelled = alice.filter((m) => m.subject === 'Your subscription to Plan A was cancelled');
    expect(cancelled).toHaveLength(1);
    // Her portal, not the subscription's internal id (a reference on receipts only).
    expect(cancelled[0]!.text).toContain('/subscriptions_manager/manage?token=');
    expect(cancelled[0]!.text).not.toContain(subA);
    // The owner cancelled with a note reading "cancelled by subscriber": she is told the merchant did. In
    // her free trial: nothing was charged, so nothing is "charged again" (found from outside).
    expect(cancelled[0]!.text).toContain('Your subscription to Plan A was cancelled by the merchant. It was in its free trial: nothing was charged.');
    expect(cancelled[0]!.text).not.toContain('by you');
    // Her trial's start was confirmed (confirmations are on by default).
    expect(alice.filter((m) => m.subject === 'Your free trial of Plan A has started')).toHaveLength(1);

    const p = await plan('Reminder plan', 2);
    const sub = await subscribe(p.id, 'carol@example.com');
    // Her trial's start first: once the clock has moved a day, that event would be too old to mail.
    await until(
      async () => mailsTo('carol@example.com'),
      (m) => m.length >= 1,
    );
    // Weekly: the renewal (and its reminder) is due one day before the trial ends.
    await advance(86_400 + 120);
    const reminderId = await eventId('renewal.reminder', sub);
    const hook = await until(
      async () => hitsFor('/all', reminderId),
      (h) => h.length > 0,
    );
    const invoice: string = JSON.parse(hook[0]!.body).data.payment_request;
    expect(invoice).toMatch(/^ln/);
    const got = await until(
      async () => mailsTo('carol@example.com'),
      (m) => m.length >= 2,
    );
    // The trial's end and its renewal invoice in one message.
    const reminder = got.filter((m) => m.subject === 'Your free trial of Reminder plan is ending: payment due');
    expect(reminder).toHaveLength(1);
    expect(reminder[0]!.text).toContain(`lightning:${invoice}`);
    expect(reminder[0]!.text).toContain('1,000 sats');
    // Marked sent just after the SMTP server took it.
    const carolRows = () =>
      rows(`SELECT status, count(*)::int AS n FROM notifier.notifications WHERE recipient = 'carol@example.com' AND channel = 'email' GROUP BY status`);
    expect(await until(carolRows, (r) => r.length === 1 && r[0].status === 'delivered')).toEqual([{ status: 'delivered', n: 2 }]);
  });

  it('a paid activation is confirmed to a subscriber who wants confirmations, and to no one else', async () => {
    const paid = (await admin().post('/plans', { name: 'Paid plan', amount_sats: 1500, interval: 'monthly' })).body;
    for (const [email, receive_confirmations] of [
      ['dave@example.com', true],
      ['erin@example.com', false],
    ] as const) {
      const res = await client(stack.api).post('/public/subscribe', { plan_id: paid.id, payment_method: 'lightning', email, receive_confirmations });
      expect(res.status).toBe(201);
      expect((await client(stack.api).post(`/dev/payments/${res.body.payment_id}/pay`)).status).toBe(200);
      await eventId('subscription.activated', res.body.subscription_id);
    }
    const dave = await until(
      async () => mailsTo('dave@example.com'),
      (m) => m.length > 0,
    );
    expect(dave.map((m) => m.subject)).toEqual(['Your subscription to Paid plan is active']);
    expect(dave[0]!.text).toContain('1,500 sats');
    await new Promise((r) => setTimeout(r, 1500));
    expect(mailsTo('erin@example.com')).toEqual([]);
  });

  it('every event redelivered to a restarted notifier (private URLs refused there): no second webhook, no second e-mail', async () => {
    const counts = async () => ({
      deliveries: (await rows('SELECT count(*)::int AS n FROM notifier.deliveries'))[0].n,
      notifications: (await rows('SELECT count(*)::int AS n FROM notifier.notifications'))[0].n,
    });
    const before = { hits: hits.length, mails: mails.length, ...(await counts()) };
    const events: number = (await rows('SELECT count(*)::int AS n FROM billing.outbox'))[0].n;

    await stack.services.notifier.stop();
    // A new durable consumer starts from the first event in the stream: everything is delivered again.
    const nc: NatsConnection = await connect({ servers: stack.natsUrl, ...stack.natsOperator });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.consumers.delete('EVENTS', 'notifier');
      const strict = await startService('notifier', { ...stack.env, WEBHOOK_ALLOW_PRIVATE: '0' });
      try {
        const refused = await admin().post('/webhook-endpoints', { url: `${receiverUrl}/nope` });
        expect(refused.status).toBe(422);
        expect(refused.body.detail[0].loc).toEqual(['body', 'url']);
        expect(refused.body.detail[0].msg).toMatch(/^url .*127\.0\.0\.1/);
        const localhost = await admin().post('/webhook-endpoints', { url: 'http://localhost:9/hook' });
        expect(localhost.status).toBe(422);

        const info = await until(
          () => jsm.consumers.info('EVENTS', 'notifier'),
          (i) => i.num_pending === 0 && i.num_ack_pending === 0 && i.delivered.stream_seq >= events,
        );
        expect(info.num_pending).toBe(0);
        const replayed = strict.lines.filter((l) => l.includes('"event handled"'));
        expect(replayed.length).toBeGreaterThanOrEqual(events);
        expect(replayed.every((l) => l.includes('"deliveries":0') && l.includes('"notifications":0'))).toBe(true);
        await new Promise((r) => setTimeout(r, 1000));
        expect({ hits: hits.length, mails: mails.length, ...(await counts()) }).toEqual(before);
      } finally {
        await strict.stop();
      }
    } finally {
      await nc.close();
    }
  });
  it('an event handled after the dev clock moved days ahead still reaches the subscriber: its age is its time in the stream', async () => {
    const p = await plan('Late plan', 7);
    // The notifier is away while the trial starts and the clock then moves two days: it handles the event
    // with a clock two days past the event's timestamp, seconds after the event entered the stream.
    await stack.services.notifier.stop();
    try {
      const sub = await subscribe(p.id, 'late@example.com');
      await eventId('subscription.created', sub);
      await advance(2 * 86_400);
    } finally {
      await stack.restartNotifier();
    }
    const got = await until(
      async () => mailsTo('late@example.com'),
      (m) => m.length >= 1,
    );
    expect(got.map((m) => m.subject)).toEqual(['Your free trial of Late plan has started']);
  });
});
