import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { ROOT, walletCli } from '../scripts/stack.mjs';
import { beforeAll } from 'vitest';
import { client } from './support/http.js';
import { newWallets, type WalletKeys } from './support/stack.js';

const stack = inject('stack');
let w1: WalletKeys, w2: WalletKeys;
let admin: ReturnType<typeof client>;
beforeAll(async () => {
  [w1, w2] = (await newWallets(stack.databaseUrl, 2)) as [WalletKeys, WalletKeys];
  admin = client(stack.api, w1.admin_key);
});
const body = { name: 'Idem', amount_sats: 1000, interval: 'weekly' } as const;

async function planCount(walletId: string): Promise<number> {
  const db = new pg.Client({ connectionString: stack.databaseUrl });
  await db.connect();
  try {
    return (await db.query('SELECT count(*)::int AS n FROM billing.plans WHERE wallet_id = $1', [walletId])).rows[0].n;
  } finally {
    await db.end();
  }
}

describe('Idempotency-Key', () => {
  it('replays the first response for the same key and body, and creates one plan', async () => {
    const before = await planCount(w1.id);
    const key = `k-${Date.now()}`;
    const first = await admin.post('/plans', body, { headers: { 'Idempotency-Key': key } });
    const again = await admin.post('/plans', body, { headers: { 'Idempotency-Key': key } });
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await planCount(w1.id)).toBe(before + 1);
  });

  it('answers 409 for the same key with another body, and changes nothing', async () => {
    const key = `k2-${Date.now()}`;
    await admin.post('/plans', body, { headers: { 'Idempotency-Key': key } });
    const before = await planCount(w1.id);
    const other = await admin.post('/plans', { ...body, amount_sats: 2000 }, { headers: { 'Idempotency-Key': key } });
    expect(other.status).toBe(409);
    expect(other.body.detail).toMatch(/Idempotency-Key/);
    expect(await planCount(w1.id)).toBe(before);
  });

  it('executes once when the same key arrives concurrently', async () => {
    const before = await planCount(w1.id);
    const key = `k3-${Date.now()}`;
    const results = await Promise.all(Array.from({ length: 10 }, () => admin.post('/plans', body, { headers: { 'Idempotency-Key': key } })));
    const statuses = results.map((r) => r.status);
    expect(statuses.every((s) => s === 201 || s === 409)).toBe(true);
    const created = new Set(results.filter((r) => r.status === 201).map((r) => r.body.id));
    expect(created.size).toBe(1);
    expect(await planCount(w1.id)).toBe(before + 1);
  });

  it('keys are per wallet: another wallet may use the same key', async () => {
    const key = `shared-${Date.now()}`;
    const a = await admin.post('/plans', body, { headers: { 'Idempotency-Key': key } });
    const b = await client(stack.api, w2.admin_key).post('/plans', body, { headers: { 'Idempotency-Key': key } });
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(b.body.id).not.toBe(a.body.id);
  });

  it("keys are per subscriber token: another token, or none valid, never replays a subscriber's answer nor spoils theirs", async () => {
    // Found from outside: portal keys shared one public scope, so a wrong token got the owner's 200 replayed
    // and a stranger's 404 under the same key was replayed to the real subscriber, whose cancel never ran.
    const anon = client(stack.api);
    const plan = (await admin.post('/plans', { name: 'Portal idem', amount_sats: 1000, interval: 'weekly', trial_days: 7 })).body;
    const start = async (email: string) => {
      const r = await anon.post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email });
      expect(r.status).toBe(201);
      return { id: r.body.subscription_id as string, token: new URL(r.body.manage_url).searchParams.get('token')! };
    };
    const [victim, stranger] = [await start('victim@example.com'), await start('stranger@example.com')];
    const cancel = (who: { token: string }, sub: string, key: string) =>
      anon.post(`/public/manage/subscription/${sub}/cancel`, undefined, { headers: { 'X-Subscriber-Token': who.token, 'Idempotency-Key': key } });

    const first = `cancel-${stranger.id}`;
    expect((await cancel(stranger, stranger.id, first)).status).toBe(200);
    for (const who of [victim, { token: 'not-a-token' }]) {
      const again = await cancel(who, stranger.id, first);
      expect(again.headers.get('idempotent-replayed')).toBeNull();
      expect(again.status).toBe(who === victim ? 404 : 401);
    }

    const key = `cancel-${victim.id}`;
    expect((await cancel(stranger, victim.id, key)).status).toBe(404);
    const own = await cancel(victim, victim.id, key);
    expect(own.status).toBe(200);
    expect(own.headers.get('idempotent-replayed')).toBeNull();
    expect((await admin.get(`/subscriptions/${victim.id}`)).body.status).toBe('cancelled');
  });

  it("an anonymous key is the client's: another address sending the same key and body is not replayed the checkout's portal link", async () => {
    // Found from outside: anonymous keys shared one scope, so anyone who guessed a key and a victim's
    // e-mail got the victim's manage_url replayed (a token of an existing subscriber).
    const plan = (await admin.post('/plans', { name: 'Anon idem', amount_sats: 1000, interval: 'weekly' })).body;
    const checkout = JSON.stringify({ plan_id: plan.id, payment_method: 'lightning', email: 'anon-idem@example.com' });
    const from = (localAddress: string) =>
      new Promise<{ status: number; replayed: unknown; body: any }>((resolve, reject) => {
        const url = new URL(`${stack.api}/public/subscribe`);
        const req = request(url, { method: 'POST', localAddress, headers: { 'Content-Type': 'application/json', 'Idempotency-Key': 'guessable-1' } }, (res) => {
          let text = '';
          res.on('data', (c) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode!, replayed: res.headers['idempotent-replayed'], body: JSON.parse(text) }));
        });
        req.on('error', reject);
        req.end(checkout);
      });
    const victim = await from('127.0.0.1');
    expect(victim.status).toBe(201);
    expect(victim.body.manage_url).toContain('token=');
    const retry = await from('127.0.0.1');
    expect(retry.replayed).toBe('true');
    expect(retry.body).toEqual(victim.body);
    const other = await from('127.0.0.2');
    expect(other.replayed).toBeUndefined();
    expect(other.status).toBe(201);
    // No portal link of the existing subscriber, nor the key (behaviour.md: only when it created the subscriber; found from outside: null).
    expect(other.body).not.toHaveProperty('manage_url');
    expect(JSON.stringify(other.body)).not.toContain(new URL(victim.body.manage_url).searchParams.get('token')!);
  });
});

describe('HTTP conventions', () => {
  it('answers JSON 404 for unknown paths and carries request and trace ids', async () => {
    const res = await admin.get('/nope');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ detail: 'Not Found' });
    expect(res.headers.get('x-request-id')).toBeTruthy();
    expect(res.headers.get('x-trace-id')).toMatch(/^[0-9a-f]{32}$/);
    const echoed = await admin.get('/plans', { headers: { 'X-Request-Id': 'my-req-1' } });
    expect(echoed.headers.get('x-request-id')).toBe('my-req-1');
  });

  it('validates path parameters', async () => {
    const res = await admin.get(`/plans/${'x'.repeat(65)}`);
    expect(res.status).toBe(422);
    expect(res.body.detail[0].loc).toEqual(['path', 'id']);
  });

  it('serves health, readiness and Prometheus metrics', async () => {
    expect((await fetch(`${stack.gatewayUrl}/healthz`)).status).toBe(200);
    const ready = await fetch(`${stack.gatewayUrl}/readyz`);
    expect(await ready.json()).toEqual({ status: 'ready', checks: { database: true, bus: true } });
    const metrics = await (await fetch(`${stack.gatewayUrl}/metrics`)).text();
    expect(metrics).toMatch(/http_requests_total\{.*route="plans.list".*\} \d+/);
    const billingReady = await fetch(`${stack.billingOpsUrl}/readyz`);
    expect(billingReady.status).toBe(200);
    expect(await (await fetch(`${stack.billingOpsUrl}/metrics`)).text()).toMatch(/process_cpu_seconds_total/);
  });
});

describe('OpenAPI', () => {
  it('is served and holds every path and method of the interface spec', async () => {
    const res = await client(stack.api).get('/openapi.json');
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe('3.1.0');
    // The interface spec's endpoint list, kept in the repository (no test reads outside it).
    const fixture = readFileSync(join(ROOT, 'test', 'fixtures', 'interface-spec-endpoints.txt'), 'utf8');
    const rows = [...fixture.matchAll(/^(GET|POST|PUT|DELETE) (\/\S+)$/gm)];
    expect(rows.length).toBeGreaterThan(30);
    for (const [, method, path] of rows) {
      expect(res.body.paths, `${method} ${path}`).toHaveProperty([path!]);
      expect(res.body.paths[path!], `${method} ${path}`).toHaveProperty([method!.toLowerCase()]);
    }
    expect(res.body.components.schemas).toHaveProperty('Plan');
    expect(res.body.components.schemas).toHaveProperty('Error');
  });
});

describe('wallet tool', () => {
  it('creates wallets whose keys are stored only as hashes, and rotates keys', async () => {
    const w = await walletCli(stack.databaseUrl, 'create', '--name', 'rotating');
    expect(w.admin_key).toMatch(/^[0-9a-f]{64}$/);
    expect(w.invoice_key).toMatch(/^[0-9a-f]{64}$/);
    const db = new pg.Client({ connectionString: stack.databaseUrl });
    await db.connect();
    try {
      const dump = JSON.stringify((await db.query('SELECT * FROM gateway.wallets')).rows);
      expect(dump).not.toContain(w.admin_key);
      expect(dump).not.toContain(w.invoice_key);
    } finally {
      await db.end();
    }
    const list = await walletCli(stack.databaseUrl, 'list');
    expect(list.map((x: { id: string }) => x.id)).toContain(w.id);
    expect(JSON.stringify(list)).not.toMatch(/admin_key|invoice_key|hash/);

    const old = client(stack.api, w.admin_key);
    expect((await old.get('/plans')).status).toBe(200);
    const rotated = await walletCli(stack.databaseUrl, 'rotate-keys', '--id', w.id);
    expect(rotated.admin_key).not.toBe(w.admin_key);
    expect((await client(stack.api, rotated.admin_key).get('/plans')).status).toBe(200);
    // The gateway caches a key for KEY_CACHE_TTL_MS (500 ms here): the old key stops working after it.
    await new Promise((r) => setTimeout(r, 700));
    expect((await old.get('/plans')).status).toBe(401);
  });
});
