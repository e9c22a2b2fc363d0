import { connect } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { call, client, until } from './support/http.js';
import { expectEventsMatchSchemas, expectNoSecretAtRest } from './support/contract.js';
import { newWallets, type WalletKeys } from './support/stack.js';

/**
 * The edge as a stranger meets it: text the database cannot hold, hostile nesting, ids of another
 * wallet inside bodies, secrets at rest, wrong methods; each answered with a 4xx that changes nothing.
 */
const stack = inject('stack');
const anon = client(stack.api);
let db: pg.Pool;
let w1: WalletKeys, w2: WalletKeys;
let admin: ReturnType<typeof client>, invoice: ReturnType<typeof client>, other: ReturnType<typeof client>;
let plan: { id: string }, trialPlan: { id: string }, theirPlan: { id: string };
let sub: string, token: string;
let doc: any;
const secrets: Record<string, string[]> = { 'API key': [], 'portal token': [], 'webhook secret': [] };

const NUL = '\u0000';
const LONE = '\ud800';
const count = async (sql: string, params: unknown[] = []) => (await db.query(sql, params)).rows[0].n as number;

/** The text a request sent as given gets back (a client like fetch would normalise what is tested here). */
const raw = (text: string) =>
  new Promise<string>((resolve, reject) => {
    const { hostname, port } = new URL(stack.api);
    const socket = connect(Number(port), hostname, () => socket.write(text));
    let got = '';
    socket.on('data', (d) => {
      got += d;
    });
    socket.on('end', () => resolve(got));
    socket.on('error', reject);
    setTimeout(() => socket.end(), 3000);
  });

beforeAll(async () => {
  db = new pg.Pool({ connectionString: stack.databaseUrl, max: 2 });
  [w1, w2] = (await newWallets(stack.databaseUrl, 2)) as [WalletKeys, WalletKeys];
  for (const w of [w1, w2]) secrets['API key']!.push(w.admin_key, w.invoice_key);
  admin = client(stack.api, w1.admin_key);
  invoice = client(stack.api, w1.invoice_key);
  other = client(stack.api, w2.admin_key);
  plan = (await admin.post('/plans', { name: 'Edge', amount_sats: 1000, interval: 'monthly' })).body;
  trialPlan = (await admin.post('/plans', { name: 'Edge trial', amount_sats: 1000, interval: 'weekly', trial_days: 7 })).body;
  theirPlan = (await other.post('/plans', { name: 'Theirs', amount_sats: 1000, interval: 'monthly' })).body;
  const trial = await anon.post('/public/subscribe', { plan_id: trialPlan.id, payment_method: 'lightning', email: 'edge@example.com', name: 'Edge' });
  expect(trial.status).toBe(201);
  sub = trial.body.subscription_id;
  token = new URL(trial.body.manage_url).searchParams.get('token')!;
  secrets['portal token']!.push(token);
  doc = (await anon.get('/openapi.json')).body;
});
afterAll(() => db?.end());

/** Credentials an operation of the document takes, so the request passes auth and reaches the check. */
function authFor(op: any): Record<string, string> {
  const scheme = Object.keys(op.security?.[0] ?? {})[0];
  if (scheme === 'AdminKey') return { 'X-Api-Key': w1.admin_key };
  if (scheme === 'InvoiceKey') return { 'X-Api-Key': w1.invoice_key };
  if (scheme === 'SubscriberToken') return { 'X-Subscriber-Token': token };
  return {};
}

describe('names shown to people', () => {
  it('a plan or subscriber name with a line break, a direction override or an invisible character is 422 (found from outside: forged notice lines)', async () => {
    const plans = await count('SELECT count(*)::int AS n FROM billing.plans');
    const subs = await count('SELECT count(*)::int AS n FROM billing.subscriptions');
    for (const bad of ['Gold\nAmount: 1 sats', 'Gold\u202eLAPYAP', 'Pay\u200bPal', 'Gold\u2028line']) {
      const created = await admin.post('/plans', { name: bad, amount_sats: 1000, interval: 'monthly' });
      expect(created.status, JSON.stringify(bad)).toBe(422);
      expect(created.body.detail[0]).toMatchObject({
        loc: ['body', 'name'],
        msg: expect.stringContaining('without invisible or direction-changing characters'),
      });
      expect((await admin.put(`/plans/${plan.id}`, { name: bad })).status).toBe(422);
      const sub = await anon.post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'named@example.com', name: bad });
      expect(sub.status, JSON.stringify(bad)).toBe(422);
      expect(sub.body.detail[0].loc).toEqual(['body', 'name']);
    }
    expect(await count('SELECT count(*)::int AS n FROM billing.plans')).toBe(plans);
    expect(await count('SELECT count(*)::int AS n FROM billing.subscriptions')).toBe(subs);
    // Other scripts and emoji are names like any other.
    expect((await admin.post('/plans', { name: 'ذهب 🥇 Gold', amount_sats: 1000, interval: 'monthly' })).status).toBe(201);
  });

  it('a plan or webhook description with a direction override or a control character is 422; lines are fine (found from outside)', async () => {
    const plans = await count('SELECT count(*)::int AS n FROM billing.plans');
    const endpoints = await count('SELECT count(*)::int AS n FROM notifier.endpoints');
    for (const bad of ['Monthly box ‮00.1$ only', 'Box⁦isolated⁩', 'Bell', 'Box﻿']) {
      const created = await admin.post('/plans', { name: 'Described', description: bad, amount_sats: 1000, interval: 'monthly' });
      expect(created.status, JSON.stringify(bad)).toBe(422);
      expect(created.body.detail[0]).toMatchObject({ loc: ['body', 'description'], msg: expect.stringContaining('direction-changing') });
      expect((await admin.put(`/plans/${plan.id}`, { description: bad })).status, JSON.stringify(bad)).toBe(422);
      const hook = await admin.post('/webhook-endpoints', { url: 'https://example.com/hook', description: bad });
      expect(hook.status, JSON.stringify(bad)).toBe(422);
      expect(hook.body.detail[0].loc).toEqual(['body', 'description']);
    }
    expect(await count('SELECT count(*)::int AS n FROM billing.plans')).toBe(plans);
    expect(await count('SELECT count(*)::int AS n FROM notifier.endpoints')).toBe(endpoints);
    // Lines, tabs, other scripts with their marks, and emoji are a description like any other.
    const fine = 'Line one\n\tLine two: ذهب\u200f 🥇';
    const ok = await admin.post('/plans', { name: 'Described', description: fine, amount_sats: 1000, interval: 'monthly' });
    expect(ok.status).toBe(201);
    expect(ok.body.description).toBe(fine);
  });

  it('a provider account id with spaces or characters outside ASCII is 422 (found from outside: sent in a header)', async () => {
    for (const field of ['cardproc_account_id', 'walletproc_merchant_id']) {
      for (const bad of ['acct_1‮', 'acct 1', 'acct_1\r\nX-Evil: 1', 'acct_é']) {
        const r = await admin.post('/plans', { name: 'Acct', amount_sats: 1000, interval: 'monthly', [field]: bad });
        expect(r.status, `${field} ${JSON.stringify(bad)}`).toBe(422);
        expect(r.body.detail[0].loc).toEqual(['body', field]);
      }
      const ok = await admin.post('/plans', { name: 'Acct', amount_sats: 1000, interval: 'monthly', [field]: 'acct_1AbC-2_x' });
      expect(ok.status, field).toBe(201);
    }
  });
});

describe('text the database cannot hold: NUL and unpaired surrogates', () => {
  it('an id that cannot exist is 404 naming the parameter on every operation with a path id, whatever its auth (found from outside: a bare "Not Found" for bytes that are not UTF-8)', async () => {
    let checked = 0;
    for (const [path, item] of Object.entries<any>(doc.paths)) {
      if (!path.includes('{')) continue;
      const names = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
      for (const [method, op] of Object.entries<any>(item)) {
        for (const bad of ['%00', 'pla%00n', '%ED%A0%80', '%ED%B0%80x', '%zz']) {
          const url = path.replace(/\{\w+\}/g, bad);
          const r = await call(stack.api, method.toUpperCase(), url, {
            headers: { ...authFor(op), 'Idempotency-Key': `nul-${checked}` },
            body: op.requestBody ? {} : undefined,
          });
          expect(r.status, `${method} ${url}`).toBe(404);
          expect(r.body, `${method} ${url}`).toEqual({
            detail: expect.stringMatching(/^Not found: no \w+ contains NUL, an unpaired surrogate or text that does not percent-decode to UTF-8$/),
          });
          expect(names, `${method} ${url}`).toContain(/^Not found: no (\w+)/.exec(r.body.detail)![1]);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(60);
  });

  it('a query value is 422 naming it, percent-encoded NUL or lone surrogate alike', async () => {
    const cases: [string, string][] = [
      ['/subscribers?search=%00', 'search'],
      ['/subscribers?search=a%ED%A0%80b', 'search'],
      ['/payments?subscription_id=sub_%00', 'subscription_id'],
      ['/payments?subscription_id=%ED%B0%80', 'subscription_id'],
      ['/subscriptions?status=%00', 'status'],
    ];
    for (const [url, field] of cases) {
      const r = await invoice.get(url);
      expect(r.status, url).toBe(422);
      expect(
        r.body.detail.map((i: { loc: unknown[] }) => i.loc),
        url,
      ).toContainEqual(['query', field]);
    }
    expect((await invoice.get('/subscribers?search=%F0%9F%98%80')).status).toBe(200); // a real (paired) emoji is text
  });

  it('a body string or metadata key/value is 422 naming the field, and nothing is stored', async () => {
    const plans = await count('SELECT count(*)::int AS n FROM billing.plans WHERE wallet_id = $1', [w1.id]);
    const subscribers = await count('SELECT count(*)::int AS n FROM billing.subscribers WHERE wallet_id = $1', [w1.id]);
    for (const bad of [NUL, LONE, `a${LONE}b`, '\udc00', `x${NUL}`]) {
      const cases: [() => Promise<{ status: number; body: any }>, unknown[]][] = [
        [() => admin.post('/plans', { name: bad, amount_sats: 1000, interval: 'monthly' }), ['body', 'name']],
        [() => admin.post('/plans', { name: 'ok', description: bad, amount_sats: 1000, interval: 'monthly' }), ['body', 'description']],
        [() => admin.put(`/plans/${plan.id}`, { description: `d${bad}` }), ['body', 'description']],
        [() => admin.put(`/subscriptions/${sub}`, { metadata: { k: bad } }), ['body', 'metadata', 'k']],
        [() => admin.put(`/subscriptions/${sub}`, { metadata: { [`k${NUL}`]: 'v' } }), ['body', 'metadata', 'k\ufffd']],
        [() => anon.post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'n@example.com', name: bad }), ['body', 'name']],
        [
          () => anon.post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'n@example.com', messenger: bad }),
          ['body', 'messenger'],
        ],
        [() => anon.post('/public/subscribe', { plan_id: `${plan.id}${bad}`, payment_method: 'lightning', email: 'n@example.com' }), ['body', 'plan_id']],
        [
          () =>
            admin.post('/watchonly-wallets', {
              name: bad,
              xpub: 'zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1ADqtfSdVCToUG868RvUUkgDKf31mGDtKsAYz2oz2AGutZYs',
            }),
          ['body', 'name'],
        ],
        [() => admin.post('/webhook-endpoints', { url: 'https://93.184.216.34/hook', description: bad }), ['body', 'description']],
      ];
      for (const [send, loc] of cases) {
        const r = await send();
        expect(r.status, `${JSON.stringify(bad)} ${loc.join('.')}`).toBe(422);
        expect(r.body.detail.map((i: { loc: unknown[] }) => i.loc)).toContainEqual(loc);
      }
    }
    expect(await count('SELECT count(*)::int AS n FROM billing.plans WHERE wallet_id = $1', [w1.id])).toBe(plans);
    expect(await count('SELECT count(*)::int AS n FROM billing.subscribers WHERE wallet_id = $1', [w1.id])).toBe(subscribers);
    expect((await invoice.get(`/subscriptions/${sub}`)).body.metadata ?? {}).toEqual({});
  });
});

describe('body bytes', () => {
  it('a JSON body that is not valid UTF-8 is 400 saying so, and nothing is stored', async () => {
    const plans = await count('SELECT count(*)::int AS n FROM billing.plans WHERE wallet_id = $1', [w1.id]);
    const json = (name: Buffer) => Buffer.concat([Buffer.from('{"name":"'), name, Buffer.from('","amount_sats":1000,"interval":"monthly"}')]);
    // A stray continuation byte, a truncated sequence, an overlong encoding and an encoded surrogate.
    for (const bytes of [[0x80], [0xe2, 0x82], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xff]]) {
      const r = await admin.post('/plans', undefined, { raw: json(Buffer.from([0x41, ...bytes, 0x42])) });
      expect(r.status, JSON.stringify(bytes)).toBe(400);
      expect(r.body.detail).toMatch(/not valid UTF-8/);
    }
    expect(await count('SELECT count(*)::int AS n FROM billing.plans WHERE wallet_id = $1', [w1.id])).toBe(plans);
    // Valid multi-byte UTF-8 is taken as it is.
    const ok = await admin.post('/plans', undefined, { raw: json(Buffer.from('Café ₿ 🚀')) });
    expect(ok.status, JSON.stringify(ok.body)).toBe(201);
    expect(ok.body.name).toBe('Café ₿ 🚀');
  });

  it('a charset other than UTF-8 is 415 saying so, and nothing is stored (found from outside: UTF-16 made a plan)', async () => {
    const plans = await count('SELECT count(*)::int AS n FROM billing.plans WHERE wallet_id = $1', [w1.id]);
    const body = '{"name":"Sixteen","amount_sats":1000,"interval":"monthly"}';
    const bytes: [string, Buffer][] = [
      ['utf-16', Buffer.from(body, 'utf16le')],
      ['UTF-16', Buffer.from(body)],
      ['utf-32', Buffer.from(body)],
      ['utf8', Buffer.from(body)],
      ['latin1', Buffer.from(body, 'latin1')],
      ['iso-8859-1', Buffer.from(body, 'latin1')],
    ];
    for (const [charset, raw] of bytes) {
      const r = await admin.post('/plans', undefined, { raw, headers: { 'Content-Type': `application/json; charset=${charset}` } });
      expect(r.status, charset).toBe(415);
      expect(r.body.detail, charset).toBe('Unsupported charset: send the JSON body as UTF-8');
    }
    expect(await count('SELECT count(*)::int AS n FROM billing.plans WHERE wallet_id = $1', [w1.id])).toBe(plans);
    // A public POST too (a stranger reported a checkout made with a UTF-16 label on a UTF-8 body).
    const checkout = JSON.stringify({ plan_id: plan.id, payment_method: 'lightning', email: 'sixteen@example.com' });
    for (const charset of ['utf-16', 'UTF-16LE']) {
      const r = await anon.post('/public/subscribe', undefined, {
        raw: Buffer.from(checkout),
        headers: { 'Content-Type': `application/json; charset=${charset}` },
      });
      expect([r.status, r.body.detail], charset).toEqual([415, 'Unsupported charset: send the JSON body as UTF-8']);
    }
    for (const charset of ['utf-8', 'UTF-8']) {
      const r = await admin.post('/plans', undefined, { raw: Buffer.from(body), headers: { 'Content-Type': `application/json; charset=${charset}` } });
      expect(r.status, charset).toBe(201);
    }
    const zipped = await admin.post('/plans', undefined, { raw: Buffer.from(body), headers: { 'Content-Encoding': 'compress' } });
    expect(zipped.status).toBe(415);
    expect(zipped.body.detail).toMatch(/^Unsupported Content-Encoding/);
  });
});

describe('a body declared as something else than JSON', () => {
  it('to a route without credentials is 415 and changes nothing (found from outside: text/plain was read as JSON, a POST any web page can make)', async () => {
    const subscribers = await count('SELECT count(*)::int AS n FROM billing.subscribers WHERE wallet_id = $1', [w1.id]);
    const body = JSON.stringify({ plan_id: plan.id, payment_method: 'lightning', email: 'plain@example.com' });
    for (const type of ['text/plain', 'text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'nonsense']) {
      const r = await anon.post('/public/subscribe', undefined, { raw: Buffer.from(body), headers: { 'Content-Type': type } });
      expect([r.status, r.body.detail], type).toEqual([415, 'Unsupported Content-Type: send the body as application/json']);
    }
    expect(await count('SELECT count(*)::int AS n FROM billing.subscribers WHERE wallet_id = $1', [w1.id])).toBe(subscribers);
    // JSON by any of its names is read as before, and so is a body with no or an empty Content-Type.
    for (const type of ['application/json', 'Application/JSON; charset=utf-8', 'application/merge-patch+json', '']) {
      const v = await anon.post('/public/nwc/validate', undefined, { raw: Buffer.from('{"nwc_string":"x"}'), headers: { 'Content-Type': type } });
      expect([v.status, v.body.valid], type).toEqual([200, false]);
    }
    const untyped = await fetch(`${stack.api}/public/nwc/validate`, { method: 'POST', body: Buffer.from('{"nwc_string":"x"}') });
    expect(untyped.status).toBe(200);
    // A route with a key: a script sending JSON as text/plain goes on working (a browser asks leave first).
    const plain = await admin.post('/plans', undefined, {
      raw: Buffer.from('{"name":"Plain","amount_sats":1000,"interval":"monthly"}'),
      headers: { 'Content-Type': 'text/plain' },
    });
    expect(plain.status).toBe(201);
  });
});

describe('deeply nested JSON', () => {
  const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
  const nestedObject = (n: number) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);

  it('is 422 before any other work on every POST route, bodiless ones included, with or without Idempotency-Key', async () => {
    const routes: [string, ReturnType<typeof client>, Record<string, string>?][] = [
      [`/subscriptions/${sub}/pause`, admin],
      [`/subscriptions/${sub}/resume`, admin],
      [`/subscriptions/${sub}/cancel`, admin],
      [`/subscriptions/${sub}/extend?days=1`, admin],
      ['/plans', admin],
      ['/webhook-endpoints', admin],
      ['/webhook-endpoints/whe_x/deliveries/del_x/replay', admin],
      ['/public/subscribe', anon],
      [`/public/manage/subscription/${sub}/cancel`, anon, { 'X-Subscriber-Token': token }],
    ];
    const before = (await invoice.get(`/subscriptions/${sub}`)).body;
    for (const [url, c, headers] of routes) {
      for (const raw of [deep(20_000), nestedObject(5_000), deep(33)]) {
        for (const idem of [true, false]) {
          const r = await c.post(url, undefined, { raw, headers: { ...headers, ...(idem ? { 'Idempotency-Key': `deep-${url}` } : {}) } });
          expect(r.status, `${url} ${raw.length} ${idem}`).toBe(422);
          expect(r.body.detail[0]).toMatchObject({ loc: ['body'], type: 'too_deep' });
        }
      }
    }
    // Nothing ran: the subscription is as it was, and the keys are free for a real request.
    expect((await invoice.get(`/subscriptions/${sub}`)).body).toEqual(before);
    const ok = await admin.post(`/subscriptions/${sub}/pause`, undefined, { headers: { 'Idempotency-Key': `deep-/subscriptions/${sub}/pause` } });
    expect(ok.status).toBe(200);
    expect((await admin.post(`/subscriptions/${sub}/resume`)).status).toBe(200);
    // 32 levels is still JSON the routes read.
    expect((await admin.put(`/subscriptions/${sub}`, undefined, { raw: JSON.stringify({ metadata: { k: 'v' } }) })).status).toBe(200);
  });
});

describe('ids of another wallet inside request bodies', () => {
  it("a webhook endpoint naming another wallet's (or no) plan is 404 and not created", async () => {
    const before = await count('SELECT count(*)::int AS n FROM notifier.endpoints WHERE wallet_id = $1', [w1.id]);
    for (const plan_id of [theirPlan.id, 'plan_01NOSUCHPLAN']) {
      const r = await admin.post('/webhook-endpoints', { url: 'https://93.184.216.34/hook', plan_id });
      expect(r.status, plan_id).toBe(404);
      expect(r.body.detail).toBe('Plan not found');
    }
    expect(await count('SELECT count(*)::int AS n FROM notifier.endpoints WHERE wallet_id = $1', [w1.id])).toBe(before);
    const own = await admin.post(
      '/webhook-endpoints',
      { url: 'https://93.184.216.34/hook', plan_id: plan.id },
      { headers: { 'Idempotency-Key': 'own-endpoint' } },
    );
    expect(own.status).toBe(201);
    secrets['webhook secret']!.push(own.body.secret);
  });

  it("a plan naming another wallet's (or no) watch-only wallet is 404, on any plan", async () => {
    const theirs = await other.post('/watchonly-wallets', {
      name: 'Theirs',
      xpub: 'xpub661MyMwAqRbcFtXgS5sYJABqqG9YLmC4Q1Rdap9gSE8NqtwybGhePY2gZ29ESFjqJoCu1Rupje8YtGqsefD265TMg7usUDFdp6W1EGMcet8',
    });
    expect(theirs.status).toBe(201);
    for (const watchonly_wallet_id of [theirs.body.id, 'wow_01NOSUCHWALLET']) {
      expect((await admin.post('/plans', { name: 'P', amount_sats: 1000, interval: 'monthly', watchonly_wallet_id })).status).toBe(404);
      expect((await admin.put(`/plans/${plan.id}`, { watchonly_wallet_id })).status).toBe(404);
    }
    expect((await invoice.get(`/plans/${plan.id}`)).body.watchonly_wallet_id).toBeNull();
  });
});

describe('HTTP conventions', () => {
  it('a known path with a method it does not take is 405 with Allow', async () => {
    const r = await call(stack.api, 'PATCH', `/plans/${plan.id}`, { key: w1.admin_key, body: {} });
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('GET, PUT, DELETE, HEAD');
    const d = await call(stack.api, 'DELETE', '/public/subscribe');
    expect(d.status).toBe(405);
    expect(d.headers.get('allow')).toBe('POST');
    expect((await call(stack.api, 'GET', '/no-such-path')).status).toBe(404);
  });

  it('a parameter or body a route does not take is 422 and the action does not run', async () => {
    const doomed = (await admin.post('/plans', { name: 'Not archived', amount_sats: 1000, interval: 'monthly' })).body;
    const dry = await admin.del(`/plans/${doomed.id}?dry_run=true`);
    expect(dry.status).toBe(422);
    expect(dry.body.detail).toEqual([expect.objectContaining({ loc: ['query', 'dry_run'] })]);
    const withBody = await call(stack.api, 'DELETE', `/plans/${doomed.id}`, { key: w1.admin_key, body: { x: 1 } });
    expect(withBody.status).toBe(422);
    expect(withBody.body.detail).toEqual([expect.objectContaining({ loc: ['body', 'x'] })]);
    expect((await invoice.get(`/plans/${doomed.id}?foo=1`)).status).toBe(422);
    expect((await invoice.get(`/plans/${doomed.id}`)).body.is_deleted).toBe(false);
    for (const body of [{ foo: 1 }, [1, 2], 'x', 42]) {
      const r = await call(stack.api, 'POST', `/subscriptions/${sub}/pause`, { key: w1.admin_key, body });
      expect(r.status, JSON.stringify(body)).toBe(422);
    }
    const portalCancel = await call(stack.api, 'POST', `/public/manage/subscription/${sub}/cancel`, {
      headers: { 'X-Subscriber-Token': token },
      body: { immediate: true },
    });
    expect(portalCancel.status).toBe(422);
    expect((await invoice.get(`/subscriptions/${sub}`)).body.status).toBe('active');
    // An empty object is still what a bodiless route takes.
    const empty = await call(stack.api, 'GET', `/plans/${doomed.id}`, { key: w1.invoice_key });
    expect(empty.status).toBe(200);
    const pauseEmpty = await call(stack.api, 'POST', `/subscriptions/${sub}/pause`, { key: w1.admin_key, body: {} });
    expect(pauseEmpty.status).toBe(200);
    expect((await admin.post(`/subscriptions/${sub}/resume`)).status).toBe(200);
  });

  it('headers or a URL too large for the server are 431 with the JSON error body', async () => {
    for (const [what, path, headers] of [
      ['API key', '/plans', { 'X-Api-Key': 'k'.repeat(100_000) }],
      ['query', `/plans?x=${'q'.repeat(100_000)}`, { 'X-Api-Key': w1.invoice_key }],
      ['path id', `/plans/${'p'.repeat(100_000)}`, { 'X-Api-Key': w1.invoice_key }],
    ] as const) {
      const res = await fetch(`${stack.api}${path}`, { headers });
      expect(res.status, what).toBe(431);
      expect(res.headers.get('content-type'), what).toMatch(/^application\/json/);
      expect(await res.json(), what).toEqual({ detail: expect.stringMatching(/too large/) });
    }
  });

  it('a request without Host, or with an Expect the server does not meet, gets the JSON error body too (found from outside)', async () => {
    const path = new URL(stack.api).pathname;
    const noHost = await raw(`GET ${path}/plans HTTP/1.1\r\nX-Api-Key: ${w1.invoice_key}\r\nConnection: close\r\n\r\n`);
    expect(noHost).toMatch(/^HTTP\/1\.1 400 /);
    expect(noHost).toMatch(/content-type: application\/json/i);
    expect(noHost).toContain('{"detail":"An HTTP/1.1 request needs a Host header"}');
    const expect200 = await raw(
      `POST ${path}/public/nwc/validate HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
    );
    expect(expect200).toMatch(/^HTTP\/1\.1 417 /);
    expect(expect200).toContain('{"detail":"Only \\"Expect: 100-continue\\" is supported"}');
  });

  it('a request that trickles in is 408 with the JSON error body and its connection closed, within HTTP_REQUEST_TIMEOUT_MS (found from outside: held 322 s)', async () => {
    const path = new URL(stack.api).pathname;
    /** Sends `parts` with `gapMs` between them and answers what came back once the server closed, or what it had after 20 s. */
    const trickle = (parts: string[], gapMs: number) =>
      new Promise<{ text: string; closed: boolean }>((resolve, reject) => {
        const { hostname, port } = new URL(stack.api);
        let text = '';
        const socket = connect(Number(port), hostname, async () => {
          for (const part of parts) {
            if (socket.destroyed) return;
            socket.write(part);
            await new Promise((r) => setTimeout(r, gapMs));
          }
        });
        const giveUp = setTimeout(() => {
          socket.destroy();
          resolve({ text, closed: false });
        }, 20_000);
        socket.on('data', (d) => {
          text += d;
        });
        socket.on('close', () => {
          clearTimeout(giveUp);
          resolve({ text, closed: true });
        });
        socket.on('error', reject);
      });
    const before = (await client(stack.api, w1.invoice_key).get('/plans?limit=1')).body.total;
    const head = `POST ${path}/plans HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${w1.admin_key}\r\nContent-Type: application/json\r\n`;
    const body = JSON.stringify({ name: 'Trickled', amount_sats: 1000, interval: 'monthly' });
    const started = Date.now();
    const [stalledBody, stalledHeaders] = await Promise.all([
      // The headers whole, then a body that stops half way; headers that never end.
      trickle([`${head}Content-Length: ${body.length}\r\n\r\n${body.slice(0, 10)}`], 0),
      trickle([`GET ${path}/plans HTTP/1.1\r\nHost: x\r\nX-Api-`], 0),
    ]);
    // The stack's HTTP_REQUEST_TIMEOUT_MS is 4 s (Node's own would be 300 s, 60 s for headers); Node
    // looks every second, and a loaded machine may add a little.
    expect(Date.now() - started).toBeGreaterThanOrEqual(3900);
    expect(Date.now() - started).toBeLessThan(12_000);
    for (const got of [stalledBody, stalledHeaders]) {
      expect(got.closed).toBe(true);
      expect(got.text).toMatch(/^HTTP\/1\.1 408 /);
      expect(got.text).toMatch(/content-type: application\/json/i);
      expect(got.text).toContain('{"detail":"The request took too long to arrive"}');
    }
    expect((await client(stack.api, w1.invoice_key).get('/plans?limit=1')).body.total).toBe(before);
    // A slow client that does send its request within the time is served.
    const slow = await trickle([head, `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`, body.slice(0, 10), body.slice(10)], 500);
    expect(slow.text).toMatch(/^HTTP\/1\.1 201 /);
    expect((await client(stack.api, w1.invoice_key).get('/plans?limit=1')).body.total).toBe(before + 1);
  });

  it('two Host headers are 400 with the JSON error body, as RFC 9112 asks (found from outside: taken as the first)', async () => {
    const path = new URL(stack.api).pathname;
    for (const hosts of ['Host: a\r\nHost: b', 'Host: a\r\nHost: a']) {
      const got = await raw(`GET ${path}/plans HTTP/1.1\r\n${hosts}\r\nX-Api-Key: ${w1.invoice_key}\r\nConnection: close\r\n\r\n`);
      expect(got, hosts).toMatch(/^HTTP\/1\.1 400 /);
      expect(got, hosts).toMatch(/content-type: application\/json/i);
      expect(got, hosts).toContain('{"detail":"A request must have one Host header, not more"}');
    }
    expect(await raw(`GET ${path}/plans HTTP/1.1\r\nHost: a\r\nX-Api-Key: ${w1.invoice_key}\r\nConnection: close\r\n\r\n`)).toMatch(/^HTTP\/1\.1 200 /);
  });

  it('CONNECT is answered like any method a path does not take: 405 with Allow on a route, else 400, then the connection closes (found from outside: no answer at all)', async () => {
    const path = new URL(stack.api).pathname;
    const allow = (await call(stack.api, 'PATCH', '/plans', { key: w1.admin_key, body: {} })).headers.get('allow');
    const onRoute = await raw(`CONNECT ${path}/plans HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${w1.admin_key}\r\n\r\n`);
    expect(onRoute).toMatch(/^HTTP\/1\.1 405 /);
    expect(onRoute).toMatch(new RegExp(`\\r\\nallow: ${allow}\\r\\n`, 'i'));
    expect(onRoute).toMatch(/content-type: application\/json/i);
    expect(onRoute).toMatch(/\r\nconnection: close\r\n/i);
    expect(onRoute).toContain('{"detail":"Method Not Allowed"}');
    for (const target of ['example.com:443', `${path}/no-such-path`]) {
      const other = await raw(`CONNECT ${target} HTTP/1.1\r\nHost: example.com:443\r\n\r\n`);
      expect(other, target).toMatch(/^HTTP\/1\.1 400 /);
      expect(other, target).toMatch(/content-type: application\/json/i);
      expect(other, target).toContain('{"detail":"CONNECT is not supported: this server is not a proxy"}');
      expect(other, target).toMatch(/\r\nx-request-id: [\w-]{36}\r\n/i);
    }
    // Seen as any other refused request: the caller's request id back, and counted (found from outside: neither).
    expect(await raw(`CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nX-Request-Id: probe-7\r\n\r\n`)).toMatch(/\r\nx-request-id: probe-7\r\n/i);
    const metrics = await (await fetch(new URL('/metrics', stack.gatewayUrl))).text();
    const counted = (status: number) =>
      Number(new RegExp(`http_requests_total\\{route="unmatched",method="CONNECT",status="${status}"[^}]*\\} (\\d+)`).exec(metrics)?.[1] ?? 0);
    expect(counted(400)).toBeGreaterThanOrEqual(3);
    expect(counted(405)).toBeGreaterThanOrEqual(1);
  });

  it('two Idempotency-Key headers, or an empty one, are 422 and the request does not run (found from outside: idempotency was off)', async () => {
    const path = new URL(stack.api).pathname;
    const body = JSON.stringify({ name: 'Keyed twice', amount_sats: 1000, interval: 'monthly' });
    const post = (keys: string) =>
      raw(
        `POST ${path}/plans HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${w1.admin_key}\r\n${keys}Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      );
    const plans = await count('SELECT count(*)::int AS n FROM billing.plans');
    expect(await post('Idempotency-Key: twice-1\r\n')).toMatch(/^HTTP\/1\.1 201 /);
    for (const keys of [
      'Idempotency-Key:\r\n',
      'Idempotency-Key: twice-1\r\nIdempotency-Key: other\r\n',
      'Idempotency-Key: twice-2\r\nIdempotency-Key: twice-2\r\n',
      'Idempotency-Key: \r\n',
    ]) {
      const got = await post(keys);
      expect(got, keys).toMatch(/^HTTP\/1\.1 422 /);
      const detail = JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4)).detail;
      expect(detail, keys).toEqual([expect.objectContaining({ loc: ['header', 'Idempotency-Key'] })]);
    }
    // A key of spaces arrives empty: said as such (found from outside: "Must be 1 to 255 characters").
    const blank = await post('Idempotency-Key:    \r\n');
    expect(JSON.parse(blank.slice(blank.indexOf('\r\n\r\n') + 4)).detail[0].msg).toBe('Must not be empty or only spaces (1 to 255 characters)');
    expect(await count('SELECT count(*)::int AS n FROM billing.plans')).toBe(plans + 1);
  });

  it('a body declared over the limit is 413 before it is sent; a client that goes on sending is read for a while, then cut off (found from outside)', async () => {
    const { hostname, port } = new URL(stack.api);
    const path = new URL(stack.api).pathname;
    // A client that does not stop at the server's FIN (curl uploading, say): it keeps writing.
    const socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true });
    let got = '';
    socket.on('data', (d) => {
      got += d;
    });
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    const errors: string[] = [];
    socket.on('error', (err) => errors.push(err.message));
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(`POST ${path}/public/subscribe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n{"plan_id":"`);
    // The old gateway read all 50 MB before answering: no answer came while the body was not sent.
    await expect.poll(() => got, { timeout: 5000 }).toMatch(/^HTTP\/1\.1 413 /);
    expect(got).toContain('{"detail":"Request body is larger than 64kb"}');
    expect(got).toMatch(/\r\nconnection: close\r\n/i); // a pooling client must not reuse it
    // Writing on right after the answer is not met with a reset (which can cost a client the 413 itself):
    // the rest is read and dropped for a while, then the gateway closes the connection.
    const chunk = 'x'.repeat(16 * 1024);
    for (let i = 0; i < 10; i++) {
      socket.write(chunk);
      await new Promise((r) => setTimeout(r, 30));
    }
    expect(errors).toEqual([]);
    const writing = setInterval(() => socket.writable && socket.write(chunk), 10);
    await closed;
    clearInterval(writing);
  });

  it('extend without days says the field is required', async () => {
    const r = await admin.post(`/subscriptions/${sub}/extend`);
    expect(r.status).toBe(422);
    expect(r.body.detail).toEqual([{ loc: ['query', 'days'], msg: 'Field required', type: 'missing' }]);
    const nan = await admin.post(`/subscriptions/${sub}/extend?days=abc`);
    expect(nan.body.detail[0].msg).toBe('Expected an integer from 1 to 3650');
  });

  it('an extend that would end the period after 9999-12-31 is 422 and changes nothing (found from outside: the portal could not show the date)', async () => {
    const c = await anon.post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'far@example.com' });
    expect(c.status).toBe(201);
    const id = c.body.subscription_id;
    // Repeated extends got there (27,000 calls); the row is set near the end instead.
    const nearEnd = 253_402_300_799 - 100 * 86_400;
    await db.query('UPDATE billing.subscriptions SET current_period_end = $2, period_anchor = $2 WHERE id = $1', [id, nearEnd]);
    const over = await admin.post(`/subscriptions/${id}/extend?days=3650`);
    expect(over.status).toBe(422);
    expect(over.body.detail).toEqual([
      { loc: ['query', 'days'], msg: 'The period would end after 9999-12-31; at most 100 more days can be added', type: 'value_error' },
    ]);
    expect((await admin.get(`/subscriptions/${id}`)).body.current_period_end).toBe(nearEnd);
    const last = await admin.post(`/subscriptions/${id}/extend?days=100`);
    expect(last.status).toBe(200);
    expect(last.body.current_period_end).toBe(253_402_300_799);
    expect((await admin.post(`/subscriptions/${id}/extend?days=1`)).status).toBe(422);
  });

  it('a checkout extended to late 9999, then paid, gets a period that ends on 9999-12-31, not in year 10000 (found from outside)', async () => {
    const c = await anon.post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'end-of-time@example.com' });
    expect(c.status).toBe(201);
    const id = c.body.subscription_id;
    // Extends got it there (10 days short of the last one); the row is set there instead.
    const nearEnd = 253_402_300_799 - 10 * 86_400;
    await db.query('UPDATE billing.subscriptions SET current_period_end = $2 WHERE id = $1', [id, nearEnd]);
    expect((await anon.post(`/dev/payments/${c.body.payment_id}/pay`)).status).toBe(200);
    const active = await until(
      () => admin.get(`/subscriptions/${id}`),
      (r) => r.body.status === 'active',
    );
    expect(active.body).toMatchObject({ status: 'active', current_period_end: 253_402_300_799 });
    const portal = await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': new URL(c.body.manage_url).searchParams.get('token')! } });
    expect(portal.body.items[0]).toMatchObject({ id, current_period_end: 253_402_300_799, access_until: 253_402_300_799 });
  });

  it('an integer query value out of range is 422 naming the bound', async () => {
    for (const [q, loc, msg] of [
      ['limit=500', 'limit', 'Expected an integer from 1 to 200'],
      ['limit=0', 'limit', 'Expected an integer from 1 to 200'],
      ['offset=-1', 'offset', 'Expected an integer of at least 0'],
      // Beyond 2^53 a number is no longer exact: one item saying so, not an int and a bound item.
      ['offset=9007199254740993', 'offset', 'Expected an integer of at least 0'],
      ['limit=99999999999999999999', 'limit', 'Expected an integer from 1 to 200'],
    ] as const) {
      const r = await invoice.get(`/plans?${q}`);
      expect(r.status, q).toBe(422);
      expect(r.body.detail, q).toEqual([expect.objectContaining({ loc: ['query', loc], msg })]);
    }
    const days = await admin.post(`/subscriptions/${sub}/extend?days=4000`);
    expect(days.body.detail[0]).toMatchObject({ loc: ['query', 'days'], msg: 'Expected an integer from 1 to 3650' });
  });

  it('a list takes only plain decimal integers for limit and offset: spaces, signs, leading zeros and exponents are 422 (found from outside)', async () => {
    const lists = Object.entries<any>(doc.paths).flatMap(([path, item]) =>
      item.get?.parameters?.some((p: { name: string; in: string }) => p.in === 'query' && p.name === 'limit') ? [[path, item.get] as const] : [],
    );
    // The owner's lists and the subscriber portal's alike: one contract for all of them.
    expect(lists.map(([path]) => path)).toEqual(expect.arrayContaining(['/plans', '/subscriptions', '/public/manage/subscriptions']));
    for (const [path, op] of lists) {
      const url = path.replace(/\{\w+\}/g, sub);
      const headers = authFor(op);
      for (const [q, field] of [
        ['limit=%2010', 'limit'],
        ['limit=10%20', 'limit'],
        ['offset=5%20', 'offset'],
        ['limit=%2B10', 'limit'],
        ['limit=+10', 'limit'], // a "+" in a query is a space
        ['limit=010', 'limit'],
        ['offset=00', 'offset'],
        ['offset=-0', 'offset'],
        ['limit=1e1', 'limit'],
        ['limit=0x10', 'limit'],
        ['limit=10.0', 'limit'],
      ] as const) {
        const r = await call(stack.api, 'GET', `${url}?${q}`, { headers });
        expect(r.status, `${url}?${q}`).toBe(422);
        expect(r.body.detail, `${url}?${q}`).toEqual([{ loc: ['query', field], msg: expect.stringMatching(/^Expected an integer/), type: expect.any(String) }]);
      }
      // The plain spelling of the same numbers is taken.
      const ok = await call(stack.api, 'GET', `${url}?limit=10&offset=0`, { headers });
      expect([404, 200], `${url}?limit=10&offset=0`).toContain(ok.status);
      if (ok.status === 200) expect(ok.body).toMatchObject({ limit: 10, offset: 0 });
    }
  });

  it('card and wallet-processor callbacks with no provider configured are 400 "Invalid callback"', async () => {
    for (const rail of ['cardproc', 'walletproc']) {
      const r = await anon.post(`/public/webhook/${rail}`, { id: 'evt_1', type: 'checkout.session.completed' });
      expect(r.status, rail).toBe(400);
      expect(r.body).toEqual({ detail: 'Invalid callback' });
    }
  });
});

describe('secrets at rest and the events', () => {
  it('a checkout sent with Idempotency-Key keeps its portal link sealed: the replay shows it, the database does not', async () => {
    const body = { plan_id: plan.id, payment_method: 'lightning', email: 'sealed@example.com' };
    const first = await anon.post('/public/subscribe', body, { headers: { 'Idempotency-Key': 'sealed-checkout' } });
    expect(first.status).toBe(201);
    const again = await anon.post('/public/subscribe', body, { headers: { 'Idempotency-Key': 'sealed-checkout' } });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
    secrets['portal token']!.push(new URL(first.body.manage_url).searchParams.get('token')!);
    const stored = (await db.query(`SELECT response_body::text AS b FROM gateway.idempotency_keys WHERE key = 'sealed-checkout'`)).rows[0].b as string;
    expect(stored).not.toContain('token');
    expect(stored).not.toContain(first.body.payment_id);
  });

  it('no API key, portal token or webhook secret this file created is stored in plain text anywhere', async () => {
    await expectNoSecretAtRest(db, secrets);
  });

  it('every event recorded so far (a lifecycle here, the other files before) matches its schema in the OpenAPI webhooks', async () => {
    // A lifecycle of our own: created (trial) above, paused, resumed, extended, cancelled, plan archived.
    expect((await admin.post(`/subscriptions/${sub}/pause`)).status).toBe(200);
    expect((await admin.post(`/subscriptions/${sub}/resume`)).status).toBe(200);
    expect((await admin.post(`/subscriptions/${sub}/extend?days=3`)).status).toBe(200);
    const archived = await admin.del(`/plans/${trialPlan.id}`);
    expect(archived.body.cancelled_subscriptions).toBe(1);
    expect((await admin.del(`/plans/${trialPlan.id}`)).body).toEqual(archived.body);
    expect((await admin.del(`/plans/${plan.id}`)).status).toBe(200);
    const seen = await expectEventsMatchSchemas(db);
    for (const e of [
      'subscription.created',
      'subscription.paused',
      'subscription.resumed',
      'subscription.extended',
      'subscription.cancelled',
      'plan.archived',
    ]) {
      expect(seen[e], e).toBeGreaterThan(0);
    }
  });
});
