import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { client } from './support/http.js';
import { newWallets, type WalletKeys } from './support/stack.js';

const stack = inject('stack');
let w0: WalletKeys, w1: WalletKeys, w2: WalletKeys;
let admin: ReturnType<typeof client>, invoice: ReturnType<typeof client>, otherAdmin: ReturnType<typeof client>;
const anon = client(stack.api);

const gold = { name: 'Gold', amount_sats: 21_000, interval: 'monthly' } as const;

let db: pg.Client;
beforeAll(async () => {
  [w0, w1, w2] = (await newWallets(stack.databaseUrl, 3)) as [WalletKeys, WalletKeys, WalletKeys];
  admin = client(stack.api, w0.admin_key);
  invoice = client(stack.api, w0.invoice_key);
  otherAdmin = client(stack.api, w1.admin_key);
  db = new pg.Client({ connectionString: stack.databaseUrl });
  await db.connect();
});
afterAll(() => db.end());

describe('POST /plans', () => {
  it('takes a plan as a read answers it: the nullable fields may be null (found from outside: 422)', async () => {
    const read = (await admin.post('/plans', { ...gold, name: 'Copied' })).body;
    expect(read).toMatchObject({ description: null, cardproc_account_id: null, walletproc_merchant_id: null, watchonly_wallet_id: null });
    const { name, amount_sats, interval, description, cardproc_account_id, walletproc_merchant_id, watchonly_wallet_id } = read;
    const copy = await admin.post('/plans', { name, amount_sats, interval, description, cardproc_account_id, walletproc_merchant_id, watchonly_wallet_id });
    expect(copy.status, JSON.stringify(copy.body)).toBe(201);
    expect(copy.body).toMatchObject({ name: 'Copied', description: null, cardproc_account_id: null, walletproc_merchant_id: null, watchonly_wallet_id: null });
  });

  it('creates a plan with the documented defaults and stores it', async () => {
    const res = await admin.post('/plans', { ...gold, description: 'All the gold' });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      wallet: w0.id,
      name: 'Gold',
      description: 'All the gold',
      amount_sats: 21_000,
      interval: 'monthly',
      trial_days: 0,
      grace_period_days: 0,
      allow_lightning: true,
      allow_onchain: false,
      allow_nwc: false,
      allow_cardproc: false,
      allow_walletproc: false,
      is_deleted: false,
    });
    expect(res.body.id).toMatch(/^plan_[0-9a-z]{26}$/);
    expect(res.body.created_at).toBe(res.body.updated_at);
    expect(Math.abs(res.body.created_at - Date.now() / 1000)).toBeLessThan(60);
    const row = await db.query('SELECT wallet_id, amount_sats, interval FROM billing.plans WHERE id = $1', [res.body.id]);
    expect(row.rows).toEqual([{ wallet_id: w0.id, amount_sats: '21000', interval: 'monthly' }]);
  });

  it.each([
    ['amount 0', { ...gold, amount_sats: 0 }, ['body', 'amount_sats']],
    ['amount above 21M BTC', { ...gold, amount_sats: 2_100_000_000_000_001 }, ['body', 'amount_sats']],
    ['fractional amount', { ...gold, amount_sats: 1.5 }, ['body', 'amount_sats']],
    ['unknown interval', { ...gold, interval: 'daily' }, ['body', 'interval']],
    ['unknown field', { ...gold, colour: 'gold' }, ['body', 'colour']],
    ['empty name', { ...gold, name: '' }, ['body', 'name']],
    ['name over 200', { ...gold, name: 'x'.repeat(201) }, ['body', 'name']],
    ['description over 2000', { ...gold, description: 'x'.repeat(2001) }, ['body', 'description']],
    ['trial over 365', { ...gold, trial_days: 366 }, ['body', 'trial_days']],
    ['grace over 90', { ...gold, grace_period_days: 91 }, ['body', 'grace_period_days']],
    ['string amount', { ...gold, amount_sats: '1000' }, ['body', 'amount_sats']],
    ['missing name', { amount_sats: 1, interval: 'weekly' }, ['body', 'name']],
    ['no method allowed', { ...gold, allow_lightning: false }, ['body']],
    ['method without provider', { ...gold, allow_cardproc: true }, ['body', 'allow_cardproc']],
  ])('rejects %s with 422 and changes nothing', async (_name, body, loc) => {
    const count = 'SELECT count(*)::int AS n FROM billing.plans WHERE wallet_id = $1';
    const before = await db.query(count, [w0.id]);
    const res = await admin.post('/plans', body);
    expect(res.status).toBe(422);
    expect(Array.isArray(res.body.detail)).toBe(true);
    expect(res.body.detail.map((d: { loc: unknown }) => d.loc)).toContainEqual(loc);
    for (const d of res.body.detail) expect(Object.keys(d).sort()).toEqual(['loc', 'msg', 'type']);
    const after = await db.query(count, [w0.id]);
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it('names the missing provider configuration when a rail is not configured', async () => {
    const res = await admin.post('/plans', { ...gold, allow_onchain: true });
    expect(res.status).toBe(422);
    const issue = res.body.detail.find((d: { loc: string[] }) => d.loc[1] === 'allow_onchain');
    expect(issue.msg).toMatch(/not configured/);
  });

  it('answers 400 for malformed JSON and 422 for a missing body', async () => {
    const bad = await admin.post('/plans', undefined, { raw: '{"name": "x",' });
    expect(bad.status).toBe(400);
    expect(typeof bad.body.detail).toBe('string');
    const none = await admin.post('/plans');
    expect(none.status).toBe(422);
    expect(none.body.detail[0].loc).toEqual(['body']);
  });

  it('says a missing field is required as a missing body is (found from outside: "expected string, received undefined")', async () => {
    const res = await admin.post('/plans', { amount_sats: 1, interval: 'weekly' });
    expect(res.status).toBe(422);
    expect(res.body.detail).toEqual([{ loc: ['body', 'name'], msg: 'Field required', type: 'missing' }]);
    // A field given as null is there, of the wrong type: not "required".
    const nul = await admin.post('/plans', { ...gold, name: null });
    expect(nul.body.detail).toEqual([{ loc: ['body', 'name'], msg: expect.not.stringMatching(/required/), type: 'invalid_type' }]);
  });

  it('answers 413 for a body over 64 KiB', async () => {
    const res = await admin.post('/plans', { ...gold, description: 'x'.repeat(70 * 1024) });
    expect(res.status).toBe(413);
    expect(typeof res.body.detail).toBe('string');
  });
});

describe('auth matrix', () => {
  let planId: string;
  beforeAll(async () => {
    planId = (await admin.post('/plans', { ...gold, name: 'Auth matrix' })).body.id;
  });

  const cases: Array<[string, string, (id: string) => string, unknown?]> = [
    ['GET', 'list', () => '/plans'],
    ['GET', 'read', (id) => `/plans/${id}`],
    ['POST', 'create', () => '/plans', gold],
    ['PUT', 'update', (id) => `/plans/${id}`, { name: 'x' }],
    ['DELETE', 'archive', (id) => `/plans/${id}`],
    ['GET', 'archive list', () => '/archive/plans'],
  ];

  it.each(cases)('%s %s without a key or with an unknown key is 401', async (method, _n, path, body) => {
    for (const key of [undefined, 'f'.repeat(64), w0.admin_key.slice(0, 63)]) {
      const res = await client(stack.api, key)[method === 'GET' ? 'get' : method === 'POST' ? 'post' : method === 'PUT' ? 'put' : 'del'](
        path(planId),
        body as never,
      );
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ detail: 'Invalid API key' });
    }
  });

  it.each(cases.filter(([m]) => m !== 'GET'))('%s %s with the invoice key is 403 and changes nothing', async (method, _n, path, body) => {
    const before = await db.query('SELECT count(*)::int AS n, max(updated_at) AS u FROM billing.plans WHERE wallet_id = $1', [w0.id]);
    const c = client(stack.api, w0.invoice_key);
    const res = method === 'POST' ? await c.post(path(planId), body) : method === 'PUT' ? await c.put(path(planId), body) : await c.del(path(planId));
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ detail: 'Admin key required' });
    const after = await db.query('SELECT count(*)::int AS n, max(updated_at) AS u FROM billing.plans WHERE wallet_id = $1', [w0.id]);
    expect(after.rows).toEqual(before.rows);
  });

  it('accepts the admin key wherever the invoice key is accepted', async () => {
    expect((await admin.get(`/plans/${planId}`)).status).toBe(200);
    expect((await admin.get('/plans')).status).toBe(200);
  });

  it("answers 404 for another wallet's plan, exactly as for an unknown id, and changes nothing", async () => {
    const foreign = await otherAdmin.get(`/plans/${planId}`);
    const unknown = await otherAdmin.get('/plans/plan_doesnotexist');
    expect(foreign.status).toBe(404);
    expect(foreign.body).toEqual({ detail: 'Plan not found' });
    expect(unknown.body).toEqual(foreign.body);
    expect((await otherAdmin.put(`/plans/${planId}`, { name: 'stolen' })).status).toBe(404);
    expect((await otherAdmin.del(`/plans/${planId}`)).status).toBe(404);
    const mine = await invoice.get(`/plans/${planId}`);
    expect(mine.body).toMatchObject({ name: 'Auth matrix', is_deleted: false });
    const theirs = await otherAdmin.get('/plans?limit=200');
    expect(theirs.body.items.map((p: { id: string }) => p.id)).not.toContain(planId);
  });
});

describe('GET /plans pagination', () => {
  it('pages newest first with correct totals', async () => {
    const c = client(stack.api, w2.admin_key);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push((await c.post('/plans', { ...gold, name: `P${i}` })).body.id);
    const all = await c.get('/plans?limit=200');
    expect(all.body.total).toBe(7);
    expect(all.body.items.map((p: { id: string }) => p.id)).toEqual([...ids].reverse());
    const page = await c.get('/plans?limit=3&offset=3');
    expect(page.status).toBe(200);
    expect(page.body).toMatchObject({ total: 7, limit: 3, offset: 3 });
    expect(page.body.items.map((p: { id: string }) => p.id)).toEqual([...ids].reverse().slice(3, 6));
    const past = await c.get('/plans?offset=50');
    expect(past.body).toMatchObject({ items: [], total: 7, limit: 50, offset: 50 });
    const dflt = await c.get('/plans');
    expect(dflt.body).toMatchObject({ limit: 50, offset: 0 });
  });

  it.each(['limit=0', 'limit=201', 'offset=-1', 'limit=abc', 'limit=1.5', 'sort=name'])('rejects %s with 422', async (q) => {
    const res = await invoice.get(`/plans?${q}`);
    expect(res.status).toBe(422);
    expect(res.body.detail[0].loc[0]).toBe('query');
  });
});

describe('PUT /plans/{id}', () => {
  it('changes only the given fields and bumps updated_at', async () => {
    const created = (await admin.post('/plans', { ...gold, name: 'Editable', description: 'd' })).body;
    await new Promise((r) => setTimeout(r, 1100));
    const res = await admin.put(`/plans/${created.id}`, { amount_sats: 5000, grace_period_days: 3 });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: 'Editable', description: 'd', amount_sats: 5000, grace_period_days: 3, created_at: created.created_at });
    expect(res.body.updated_at).toBeGreaterThan(created.updated_at);
    expect((await invoice.get(`/plans/${created.id}`)).body).toEqual(res.body);
    const cleared = await admin.put(`/plans/${created.id}`, { description: null });
    expect(cleared.body.description).toBeNull();
  });

  it('edits of different fields at once all land (found from outside: 409 "changed concurrently")', async () => {
    const created = (await admin.post('/plans', { ...gold, name: 'Busy' })).body;
    const edits = [
      { description: 'one' },
      { grace_period_days: 4 },
      { trial_days: 2 },
      { amount_sats: 22_000 },
      { description: 'one', trial_days: 2 },
      { name: 'Busy plan' },
      { interval: 'yearly' },
      { grace_period_days: 4, description: 'one' },
    ];
    // Six owners' integrations at once (found from outside: with 48 at a time, a quarter were 409).
    const all = Array.from({ length: 6 }, () => edits).flat();
    const answers = await Promise.all(all.map((e) => admin.put(`/plans/${created.id}`, e)));
    expect(answers.map((r) => r.status)).toEqual(all.map(() => 200));
    expect((await invoice.get(`/plans/${created.id}`)).body).toMatchObject({
      name: 'Busy plan',
      description: 'one',
      grace_period_days: 4,
      trial_days: 2,
      amount_sats: 22_000,
      interval: 'yearly',
    });
  });

  it('refuses a body with nothing to change, as PUT /subscriptions/{id} does, and leaves the plan as it was (found from outside: 200, updated_at bumped)', async () => {
    const created = (await admin.post('/plans', { ...gold, name: 'Untouched' })).body;
    await new Promise((r) => setTimeout(r, 1100));
    const res = await admin.put(`/plans/${created.id}`, {});
    expect(res.status).toBe(422);
    expect(res.body.detail).toEqual([{ loc: ['body'], msg: expect.stringMatching(/^Give at least one of name, amount_sats, /), type: 'custom' }]);
    expect((await invoice.get(`/plans/${created.id}`)).body).toEqual(created);
    // null is a change (it clears the description), not nothing.
    expect((await admin.put(`/plans/${created.id}`, { description: null })).status).toBe(200);
  });

  it('validates like create and rejects turning every method off', async () => {
    const created = (await admin.post('/plans', gold)).body;
    for (const body of [{ amount_sats: 0 }, { interval: 'hourly' }, { wallet: 'x' }, { allow_lightning: false }, { is_deleted: false }]) {
      const res = await admin.put(`/plans/${created.id}`, body);
      expect(res.status).toBe(422);
    }
    expect((await invoice.get(`/plans/${created.id}`)).body).toEqual(created);
  });
});

describe('archive', () => {
  it('archives idempotently, hides the plan from lists and the public endpoint, keeps it readable, emits one event', async () => {
    const c = client(stack.api, w2.admin_key);
    const plan = (await c.post('/plans', { ...gold, name: 'To archive' })).body;
    expect((await anon.get(`/public/plan/${plan.id}`)).status).toBe(200);

    const first = await c.del(`/plans/${plan.id}`);
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ id: plan.id, is_deleted: true, cancelled_subscriptions: 0 });
    const second = await c.del(`/plans/${plan.id}`);
    expect(second.status).toBe(200);
    expect(second.body).toMatchObject({ id: plan.id, is_deleted: true, cancelled_subscriptions: 0 });

    expect((await c.get('/plans?limit=200')).body.items.map((p: { id: string }) => p.id)).not.toContain(plan.id);
    const archived = await c.get('/archive/plans');
    expect(archived.body.items.map((p: { id: string }) => p.id)).toContain(plan.id);
    expect(archived.body.total).toBeGreaterThanOrEqual(1);
    expect((await c.get(`/plans/${plan.id}`)).body).toMatchObject({ id: plan.id, is_deleted: true });
    expect((await anon.get(`/public/plan/${plan.id}`)).status).toBe(404);

    const upd = await c.put(`/plans/${plan.id}`, { name: 'revived' });
    expect(upd.status).toBe(409);
    expect(typeof upd.body.detail).toBe('string');

    const outbox = await db.query(`SELECT payload FROM billing.outbox WHERE payload->'data'->>'plan_id' = $1`, [plan.id]);
    expect(outbox.rows).toHaveLength(1);

    // The relay moves it to JetStream: exactly one plan.archived event for this plan.
    const nc = await connect({ servers: stack.natsUrl, ...stack.natsOperator });
    try {
      const js = jetstream(nc);
      const consumer = await js.consumers.get('EVENTS', { filter_subjects: 'events.plan.archived' });
      const seen: any[] = [];
      const until = Date.now() + 10_000;
      while (Date.now() < until && seen.length === 0) {
        const batch = await consumer.fetch({ max_messages: 100, expires: 1000 });
        for await (const m of batch) {
          const e = m.json<any>();
          if (e.data.plan_id === plan.id) seen.push(e);
        }
      }
      expect(seen).toHaveLength(1);
      expect(seen[0]).toMatchObject({
        event: 'plan.archived',
        wallet_id: w2.id,
        data: { plan_id: plan.id, plan_name: 'To archive', status: 'archived', cancelled_subscriptions: 0 },
      });
      // Without subscription_id on the stream (a notifier of an earlier version would park ''): its
      // webhooks carry '' (test/notifier.e2e.test.ts).
      expect(seen[0].data).not.toHaveProperty('subscription_id');
      expect(seen[0].id).toMatch(/^evt_/);
      expect(Number.isInteger(seen[0].timestamp)).toBe(true);
    } finally {
      await nc.close();
    }
  });
});

describe('GET /public/plan/{id}', () => {
  it('shows checkout fields and usable methods, never the wallet or provider account ids', async () => {
    const plan = (await admin.post('/plans', { ...gold, name: 'Public', cardproc_account_id: 'acct_secret', trial_days: 7 })).body;
    const res = await anon.get(`/public/plan/${plan.id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: plan.id,
      name: 'Public',
      description: null,
      amount_sats: 21_000,
      interval: 'monthly',
      trial_days: 7,
      grace_period_days: 0,
      allow_lightning: true,
      allow_onchain: false,
      allow_nwc: false,
      allow_cardproc: false,
      allow_walletproc: false,
      payment_methods: ['lightning'],
      // No mail server and no notification settings: no channel to offer.
      available_contact_methods: [],
      // No merchant_name saved: the seller as its messages would name it, the wallet's own name.
      merchant_name: 'test wallet 0',
      // The hosted checkout page (PUBLIC_BASE_URL defaults to http://127.0.0.1:8080).
      checkout_url: `http://127.0.0.1:8080/subscriptions_manager/checkout/${plan.id}`,
    });
    expect(JSON.stringify(res.body)).not.toContain(w0.id);
    expect(JSON.stringify(res.body)).not.toContain('acct_secret');
    expect((await anon.get('/public/plan/plan_unknown')).status).toBe(404);
  });
});
