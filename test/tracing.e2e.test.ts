import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, until } from './support/http.js';
import { startCollector, type SpanRecord } from './support/otlp.js';
import { startStack, type Stack } from './support/stack.js';

const SERVER = 2;
const CLIENT = 3;
const PRODUCER = 4;
const CONSUMER = 5;

let collector: Awaited<ReturnType<typeof startCollector>>;
let stack: Stack;
let receiver: Server;
let receiverUrl: string;
const hooks: { id: string; body: any }[] = [];

beforeAll(async () => {
  collector = await startCollector();
  receiver = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      hooks.push({ id: String(req.headers['webhook-id']), body: JSON.parse(raw) });
      res.end('ok');
    });
  });
  receiverUrl = await new Promise<string>((r) => receiver.listen(0, '127.0.0.1', () => r(`http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`)));
  stack = await startStack({
    wallets: 1,
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_BSP_SCHEDULE_DELAY: '100', WEBHOOK_ALLOW_PRIVATE: '1', NOTIFIER_POLL_INTERVAL_MS: '300' },
  });
});
afterAll(async () => {
  await stack?.stop();
  receiver?.close();
  collector?.close();
});

describe('traces across the asynchronous paths', () => {
  it('one trace from POST /dev/payments/{id}/pay through billing applying the payment to the webhook delivery', async () => {
    const admin = client(stack.api, stack.wallets[0]!.admin_key);
    expect((await admin.post('/webhook-endpoints', { url: receiverUrl, events: ['subscription.activated'] })).status).toBe(201);
    const plan = (await admin.post('/plans', { name: 'Traced', amount_sats: 1000, interval: 'monthly' })).body;
    const checkout = (await client(stack.api).post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'trace@example.com' })).body;
    const paid = await client(stack.api).post(`/dev/payments/${checkout.payment_id}/pay`);
    expect(paid.status).toBe(200);
    const traceId = paid.headers.get('x-trace-id')!;
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);

    const hook = await until(
      async () => hooks.find((h) => h.body.data.subscription_id === checkout.subscription_id),
      (h) => !!h,
      20_000,
    );
    expect(hook?.body.event).toBe('subscription.activated');

    const inTrace = () => collector.spans.filter((s) => s.traceId === traceId);
    const find = (t: SpanRecord[], service: string, name: string, kind: number) => t.find((s) => s.service === service && s.name === name && s.kind === kind);
    // Each service exports its spans on its own schedule: the delivery's may arrive before earlier steps'.
    const steps = (t: SpanRecord[]) => ({
      http: t.find((s) => s.service === 'gateway' && s.kind === SERVER),
      pay: find(t, 'payments', 'payments.dev.pay process', CONSUMER),
      received: find(t, 'payments', 'events.payment.received publish', PRODUCER),
      applied: find(t, 'billing', 'events.payment.received process', CONSUMER),
      activated: find(t, 'billing', 'events.subscription.activated publish', PRODUCER),
      recorded: find(t, 'notifier', 'events.subscription.activated process', CONSUMER),
      delivery: find(t, 'notifier', 'webhook deliver', CLIENT),
    });
    const ancestorsIn = (t: SpanRecord[], s: SpanRecord) => {
      const byId = new Map(t.map((x) => [x.spanId, x]));
      const out: string[] = [];
      for (let p = s.parentSpanId; p; p = byId.get(p)?.parentSpanId) out.push(p);
      return out;
    };
    // Complete once every step and the spans between them (SQL, bus) have arrived.
    const complete = (t: SpanRecord[]) => {
      const s = steps(t);
      if (!Object.values(s).every(Boolean)) return false;
      return [
        [s.pay!, s.http!],
        [s.received!, s.pay!],
        [s.activated!, s.applied!],
      ].every(([child, parent]) => ancestorsIn(t, child!).includes(parent!.spanId));
    };
    const t = await until(async () => inTrace(), complete, 20_000);

    // HTTP -> payments' handler -> payment.received published by the relay -> billing applies it ->
    // subscription.activated published -> the notifier records it -> the webhook attempt.
    const { http, pay, received, applied, activated, recorded, delivery } = steps(t);
    for (const span of [http, pay, received, applied, activated, recorded, delivery]) expect(span).toBeDefined();
    const ancestors = (s: SpanRecord) => ancestorsIn(t, s);
    // Every step descends from the one before it (some have SQL or bus spans between them).
    expect(ancestors(pay!)).toContain(http!.spanId);
    expect(ancestors(received!)).toContain(pay!.spanId);
    expect(applied!.parentSpanId).toBe(received!.spanId);
    expect(ancestors(activated!)).toContain(applied!.spanId);
    expect(recorded!.parentSpanId).toBe(activated!.spanId);
    expect(delivery!.parentSpanId).toBe(recorded!.spanId);
    expect(delivery!.attributes['webhook.event_id']).toBe(hook!.id);
    expect(delivery!.attributes['http.response.status_code']).toBe(200);

    // The delivery worker's sweep is a root span of its own, linked to the delivery's trace.
    const sweep = await until(
      async () => collector.spans.find((s) => s.service === 'notifier' && s.name === 'webhooks sweep' && s.links.some((l) => l.traceId === traceId)),
      (s) => !!s,
      10_000,
    );
    expect(sweep?.parentSpanId).toBeUndefined();
    expect(sweep?.traceId).not.toBe(traceId);
  });

  it("the scheduler's and the sweeper's rounds are root spans", async () => {
    const roots = await until(
      async () => collector.spans.filter((s) => !s.parentSpanId && ['scheduler sweep', 'sweeper sweep'].includes(s.name)),
      (r) => r.some((s) => s.service === 'billing') && r.some((s) => s.service === 'payments'),
      10_000,
    );
    expect(roots.find((s) => s.service === 'billing')?.name).toBe('scheduler sweep');
    expect(roots.find((s) => s.service === 'payments')?.name).toBe('sweeper sweep');
  });
});
