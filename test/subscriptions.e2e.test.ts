import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { client, until } from './support/http.js';
import { newWallets, type WalletKeys } from './support/stack.js';

const stack = inject('stack');
const anon = client(stack.api);
let w: WalletKeys, other: WalletKeys;
let admin: ReturnType<typeof client>, invoice: ReturnType<typeof client>;
let db: pg.Client;

beforeAll(async () => {
  [w, other] = (await newWallets(stack.databaseUrl, 2)) as [WalletKeys, WalletKeys];
  admin = client(stack.api, w.admin_key);
  invoice = client(stack.api, w.invoice_key);
  db = new pg.Client({ connectionString: stack.databaseUrl });
  await db.connect();
});
afterAll(() => db.end());

async function plan(body: Record<string, unknown> = {}) {
  const res = await admin.post('/plans', { name: 'Sub plan', amount_sats: 5000, interval: 'monthly', ...body });
  expect(res.status).toBe(201);
  return res.body as { id: string; name: string };
}

/** The one 409 detail for a contact that already subscribed to the plan, paid or not. */
const SUBSCRIBED_DETAIL =
  "This contact already has a subscription or a checkout of this plan. If it was paid, its link to manage it was shown when it started (and is in the seller's messages about it, if any); if not, it stays open until it is paid or expires, within 24 hours of its start";

const tokenOf = (manageUrl: string) => new URL(manageUrl).searchParams.get('token')!;

describe('public checkout', () => {
  it('starts a trial: TrialSubscriptionResponse, an active subscription with trial_end, and a portal link', async () => {
    const p = await plan({ trial_days: 14 });
    const res = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'Trial@Example.com', name: 'Tess' });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ status: 'active', trial: true, trial_days: 14 });
    expect(res.body.trial_end).toBe((await invoice.get(`/subscriptions/${res.body.subscription_id}`)).body.trial_end);
    expect(res.body.manage_url).toMatch(/\/subscriptions_manager\/manage\?token=[0-9a-f]{64}$/);
    const sub = (await invoice.get(`/subscriptions/${res.body.subscription_id}`)).body;
    expect(sub).toMatchObject({ status: 'active', plan_id: p.id, has_access: true, amount_sats: 5000, interval: 'monthly', payments: [] });
    expect(sub.trial_end - sub.created_at).toBe(14 * 86_400);
    expect(sub.current_period_end).toBe(sub.trial_end);
    // The answer says when the trial ends (the first payment is due then).
    expect(res.body.message).toBe(
      `Your 14-day free trial of ${p.name} has started; it ends on ${new Date(sub.trial_end * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`,
    );

    // The event names the plan and the subscriber as stored: a returning contact keeps the stored name.
    const other = await plan({ name: 'Other plan', trial_days: 3 });
    const again = await anon.post('/public/subscribe', { plan_id: other.id, payment_method: 'lightning', email: 'trial@example.com', name: 'Someone' });
    expect(again.status).toBe(201);
    const created = await db.query(
      `SELECT payload->'data' AS data FROM billing.outbox WHERE payload->>'event' = 'subscription.created' AND payload->'data'->>'subscription_id' = ANY($1) ORDER BY seq`,
      [[res.body.subscription_id, again.body.subscription_id]],
    );
    expect(created.rows.map((r) => r.data)).toEqual([
      expect.objectContaining({ plan_name: 'Sub plan', subscriber_email: 'Trial@Example.com', subscriber_name: 'Tess', trial: true }),
      expect.objectContaining({ plan_name: 'Other plan', subscriber_email: 'Trial@Example.com', subscriber_name: 'Tess', trial: true }),
    ]);
  });

  it('checks out a paid plan by Lightning, and the dev payment activates it exactly once', async () => {
    const p = await plan();
    const res = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'pay@example.com' });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ payment_method: 'lightning' });
    expect(res.body.payment_request).toMatch(/^lnbc/);
    expect(res.body.payment_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(res.body.qr_codes.lightning).toMatch(/^<svg/);
    expect(res.body.expires_at - Date.now() / 1000).toBeGreaterThan(3000);
    expect(res.body.manage_url).toBeTruthy();
    const subId = res.body.subscription_id;
    expect((await invoice.get(`/subscriptions/${subId}`)).body).toMatchObject({ status: 'pending', has_access: false });
    expect((await anon.get(`/public/payment/${res.body.payment_id}/status`)).body).toMatchObject({ status: 'pending', subscription_id: subId });

    const paid = await Promise.all(Array.from({ length: 5 }, () => anon.post(`/dev/payments/${res.body.payment_id}/pay`)));
    expect(paid.some((r) => r.status === 200)).toBe(true);
    const sub = await until(
      () => invoice.get(`/subscriptions/${subId}`),
      (r) => r.body.status === 'active',
    );
    expect(sub.body).toMatchObject({ status: 'active', has_access: true });
    expect(sub.body.payments).toEqual([expect.objectContaining({ id: res.body.payment_id, status: 'paid', amount_sats: 5000 })]);
    expect(sub.body.current_period_start).toBe(sub.body.payments[0].paid_at);
    const status = await anon.get(`/public/payment/${res.body.payment_id}/status`);
    expect(status.body).toMatchObject({ status: 'paid', subscription_id: subId });
    const listed = await invoice.get(`/payments?subscription_id=${subId}&status=paid&payment_method=lightning`);
    expect(listed.body).toMatchObject({ total: 1, items: [expect.objectContaining({ id: res.body.payment_id })] });
    expect((await invoice.get(`/payments?subscription_id=${subId}&status=pending`)).body.total).toBe(0);
    expect((await invoice.get(`/payments/${res.body.payment_id}`)).body).toMatchObject({ status: 'paid', payment_hash: res.body.payment_hash });
    expect((await client(stack.api, other.invoice_key).get(`/payments/${res.body.payment_id}`)).status).toBe(404);
    expect((await invoice.get(`/subscriptions/${subId}/payments`)).body.total).toBe(1);
    expect((await client(stack.api, other.invoice_key).get(`/subscriptions/${subId}/payments`)).status).toBe(404);
    const applied = await db.query('SELECT count(*)::int AS n FROM billing.applied_payments WHERE subscription_id = $1', [subId]);
    expect(applied.rows[0].n).toBe(1);
    const events = await db.query(`SELECT payload->>'event' AS e FROM billing.outbox WHERE payload->'data'->>'subscription_id' = $1 ORDER BY seq`, [subId]);
    expect(events.rows.map((r) => r.e)).toEqual(['subscription.created', 'subscription.activated']);
  });

  it('refuses a method the plan does not allow (422), an unknown plan (404), and a second live subscription (409)', async () => {
    const p = await plan();
    expect((await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'card', email: 'x@example.com' })).status).toBe(422);
    expect((await anon.post('/public/subscribe', { plan_id: 'plan_nope', payment_method: 'lightning' })).status).toBe(404);
    // In the checkout page's own words (found from outside: "Invalid email address." beside the page's own).
    for (const email of ['bad', 'a@b.c']) {
      const refused = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email });
      expect(refused.status, email).toBe(422);
      expect(refused.body.detail[0], email).toMatchObject({ loc: ['body', 'email'], msg: 'must be an e-mail address like name@example.com' });
    }
    // Too long for any Telegram chat: the same words as any other chat that is none (found from outside:
    // "at most 100 characters" for a username of 4 to 32).
    for (const messenger of ['a'.repeat(101), '@abc']) {
      const refused = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'tg@example.com', messenger });
      expect(refused.status, messenger).toBe(422);
      expect(refused.body.detail[0], messenger).toMatchObject({
        loc: ['body', 'messenger'],
        msg: expect.stringMatching(/must be a Telegram chat: a chat id of up to 16 digits, or a username of 4 to 32 letters/),
      });
    }
    const first = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'dup@example.com' });
    expect(first.status).toBe(201);
    // While unpaid, the same contact and method get their open checkout again (the checkout page's retry),
    // without the portal link; once it is paid, a second subscription is 409.
    const again = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'DUP@example.com' });
    expect(again.status).toBe(201);
    expect(again.body).toMatchObject({
      subscription_id: first.body.subscription_id,
      payment_id: first.body.payment_id,
      payment_request: first.body.payment_request,
    });
    expect(again.body.manage_url ?? null).toBeNull();
    expect((await anon.post(`/dev/payments/${first.body.payment_id}/pay`)).status).toBe(200);
    await until(
      () => anon.get(`/public/payment/${first.body.payment_id}/status`),
      (r) => r.body.status === 'paid',
    );
    const paid = await until(
      () => anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'dup@example.com' }),
      (r) => r.status === 409,
    );
    // The same words as an unpaid checkout's 409 (pages.e2e, where on-chain runs): the answer must not
    // tell whoever types an address whether that person has paid (found from outside).
    expect(paid.body).toEqual({ detail: SUBSCRIBED_DETAIL });
  });

  it('50 parallel identical checkouts make one subscription and one subscriber', async () => {
    const p = await plan();
    const body = { plan_id: p.id, payment_method: 'lightning', email: 'rush@example.com' };
    const results = await Promise.all(Array.from({ length: 50 }, () => anon.post('/public/subscribe', body)));
    // One creates the subscription (and answers the portal link); the others get the same unpaid checkout.
    expect(results.every((r) => r.status === 201)).toBe(true);
    expect(new Set(results.map((r) => `${r.body.subscription_id} ${r.body.payment_id}`)).size).toBe(1);
    expect(results.filter((r) => r.body.manage_url)).toHaveLength(1);
    const subs = await db.query('SELECT count(*)::int AS n FROM billing.subscriptions WHERE plan_id = $1', [p.id]);
    expect(subs.rows[0].n).toBe(1);
    const subscribers = await db.query(`SELECT count(*)::int AS n FROM billing.subscribers WHERE wallet_id = $1 AND lower(email) = 'rush@example.com'`, [w.id]);
    expect(subscribers.rows[0].n).toBe(1);
  });

  it('checkouts racing the plan archive: none leaves a live subscription on the archived plan', async () => {
    for (const extra of [{}, { trial_days: 3 }]) {
      const p = await plan(extra);
      const checkouts = Array.from({ length: 30 }, (_, i) =>
        anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: `race${i}-${p.id}@example.com` }),
      );
      await new Promise((r) => setTimeout(r, 30));
      const archived = await admin.del(`/plans/${p.id}`);
      expect(archived.status).toBe(200);
      const results = await Promise.all(checkouts);
      // Each checkout either ran before the archive (and was cancelled by it) or saw the plan gone.
      for (const r of results) expect([201, 404]).toContain(r.status);
      const { rows } = await db.query('SELECT status, count(*)::int AS n FROM billing.subscriptions WHERE plan_id = $1 GROUP BY status', [p.id]);
      const made = results.filter((r) => r.status === 201).length;
      expect(rows.filter((r) => r.status !== 'cancelled')).toEqual([]);
      expect(rows.reduce((n, r) => n + r.n, 0)).toBe(made);
      expect(archived.body.cancelled_subscriptions).toBe(made);
    }
  });

  it('gives a returning customer no new token', async () => {
    const [a, b] = [await plan({ trial_days: 1 }), await plan({ trial_days: 1 })];
    const first = await anon.post('/public/subscribe', { plan_id: a.id, payment_method: 'lightning', email: 'back@example.com' });
    const second = await anon.post('/public/subscribe', { plan_id: b.id, payment_method: 'lightning', email: 'back@example.com' });
    expect(first.body.manage_url).toBeTruthy();
    expect(second.status).toBe(201);
    expect(second.body.manage_url ?? null).toBeNull();
    // Only the e-mail given: nothing else to keep or drop.
    expect(second.body.contacts_unchanged).toBeUndefined();
  });

  it("a returning customer's other contact details are not stored, and the answer says so (found from outside: dropped in silence)", async () => {
    const [a, b, c] = [await plan(), await plan({ trial_days: 3 }), await plan()];
    const email = 'kept-contacts@example.com';
    const first = await anon.post('/public/subscribe', { plan_id: a.id, payment_method: 'lightning', email, name: 'Kim' });
    expect(first.status).toBe(201);
    expect(first.body.contacts_unchanged).toBeUndefined();
    const kept = async () =>
      (await db.query('SELECT name, messenger, nostr, contact_preference FROM billing.subscribers WHERE lower(email) = $1', [email])).rows;
    const stored = await kept();
    expect(stored).toEqual([{ name: 'Kim', messenger: null, nostr: null, contact_preference: null }]);
    const CONTACTS_UNCHANGED =
      "This e-mail address is known here already: the contact details stored with it are kept, and the others you gave were not added. You can change them in your subscription portal (its link was shown when you first subscribed, and is in the seller's messages).";
    // A paid plan's checkout: the flag; a trial: the flag, and its message says it.
    const paid = await anon.post('/public/subscribe', {
      plan_id: c.id,
      payment_method: 'lightning',
      email,
      name: 'Other',
    });
    expect(paid.status, JSON.stringify(paid.body)).toBe(201);
    expect(paid.body).toMatchObject({ contacts_unchanged: true });
    expect(paid.body.manage_url ?? null).toBeNull();
    const trial = await anon.post('/public/subscribe', { plan_id: b.id, payment_method: 'lightning', email, name: 'Someone else' });
    expect(trial.status).toBe(201);
    expect(trial.body.contacts_unchanged).toBe(true);
    expect(trial.body.message).toMatch(new RegExp(`has started; it ends on .+\\. ${CONTACTS_UNCHANGED.replace(/[.()?]/g, '\\$&')}$`));
    // Nothing of them was stored.
    expect(await kept()).toEqual(stored);
  });
});

describe('owner actions', () => {
  async function trialSub(email: string) {
    const p = await plan({ trial_days: 30, grace_period_days: 2 });
    const res = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email });
    return { planId: p.id, id: res.body.subscription_id as string, manageUrl: res.body.manage_url as string };
  }

  it('pause, resume, extend and cancel follow the lifecycle, with 409 for illegal moves', async () => {
    const { id } = await trialSub('actions@example.com');
    expect((await admin.post(`/subscriptions/${id}/resume`)).status).toBe(409);
    const paused = await admin.post(`/subscriptions/${id}/pause`);
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ status: 'paused', has_access: true });
    expect((await admin.post(`/subscriptions/${id}/pause`)).status).toBe(409);
    expect((await admin.post(`/subscriptions/${id}/resume`)).body).toMatchObject({ status: 'active' });

    const before = (await invoice.get(`/subscriptions/${id}`)).body;
    const extended = await admin.post(`/subscriptions/${id}/extend?days=10`);
    expect(extended.status).toBe(200);
    expect(extended.body.current_period_end).toBe(before.current_period_end + 10 * 86_400);
    expect(extended.body.trial_end).toBe(before.trial_end + 10 * 86_400);
    for (const q of ['', '?days=0', '?days=3651', '?days=x']) expect((await admin.post(`/subscriptions/${id}/extend${q}`)).status).toBe(422);

    const cancelled = await admin.post(`/subscriptions/${id}/cancel`, { reason: 'moving on' });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.success).toBe(true);
    expect(cancelled.body.message).toMatch(/^Subscription cancelled; access continues until \d{4}-/);
    const after = (await invoice.get(`/subscriptions/${id}`)).body;
    expect(after).toMatchObject({ status: 'cancelled', has_access: true, cancel_reason: 'moving on', cancelled_by: 'merchant' });
    expect((await admin.post(`/subscriptions/${id}/cancel`)).status).toBe(409);
    expect((await invoice.get('/archive/subscriptions?limit=200')).body.items.map((s: { id: string }) => s.id)).toContain(id);
  });

  it('immediate cancel ends access now', async () => {
    const { id } = await trialSub('now@example.com');
    const res = await admin.post(`/subscriptions/${id}/cancel`, { immediate: true });
    expect(res.status).toBe(200);
    expect(res.body.message).toBe('Subscription cancelled; no access remains');
    expect((await invoice.get(`/subscriptions/${id}`)).body).toMatchObject({ status: 'cancelled', has_access: false });
    // A checkout never paid had no access to keep (found from outside: "access continues until" now).
    const p = await plan();
    const pending = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'never-paid@example.com' });
    const cancelPending = await admin.post(`/subscriptions/${pending.body.subscription_id}/cancel`);
    expect(cancelPending.body.message).toBe('Subscription cancelled; no access remains');
  });

  it('keeps another wallet out (404) and the invoice key read-only (403)', async () => {
    const { id } = await trialSub('private@example.com');
    const stranger = client(stack.api, other.admin_key);
    for (const r of [
      await stranger.get(`/subscriptions/${id}`),
      await stranger.post(`/subscriptions/${id}/pause`),
      await stranger.get(`/subscriptions/${id}/manage-link`),
    ]) {
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ detail: 'Subscription not found' });
    }
    expect((await invoice.post(`/subscriptions/${id}/pause`)).status).toBe(403);
    expect((await invoice.get(`/subscriptions/${id}`)).body.status).toBe('active');
  });

  it('updates owner metadata and lists with a status filter and pagination', async () => {
    const { id } = await trialSub('meta@example.com');
    const upd = await admin.put(`/subscriptions/${id}`, { metadata: { crm: '42' }, receive_reminders: false });
    expect(upd.status).toBe(200);
    expect(upd.body).toMatchObject({ metadata: { crm: '42' }, receive_reminders: false, status: 'active' });
    expect((await admin.put(`/subscriptions/${id}`, { status: 'cancelled' })).status).toBe(422);
    // A key JavaScript cannot hold as data was dropped, wiping the metadata (found from outside): 422 now.
    for (const metadata of [{ ['__proto__']: { x: 'y' } }, { a: '1', ['__proto__']: 'b' }]) {
      const bad = await admin.put(`/subscriptions/${id}`, { metadata });
      expect(bad.status).toBe(422);
      expect(bad.body.detail[0]).toMatchObject({ loc: ['body', 'metadata', '__proto__'] });
    }
    expect((await admin.get(`/subscriptions/${id}`)).body.metadata).toEqual({ crm: '42' });
    // Settings changed beside lifecycle moves and each other wait their turn (found from outside: 409s).
    const before = (await admin.get(`/subscriptions/${id}`)).body.current_period_end;
    const crossing = await Promise.all([
      ...Array.from({ length: 12 }, (_, i) => admin.put(`/subscriptions/${id}`, { metadata: { crm: String(i) } })),
      ...Array.from({ length: 4 }, () => admin.post(`/subscriptions/${id}/extend?days=1`)),
    ]);
    expect(crossing.map((r) => r.status)).toEqual(crossing.map(() => 200));
    expect((await admin.get(`/subscriptions/${id}`)).body.current_period_end).toBe(before + 4 * 86_400);
    const active = await invoice.get('/subscriptions?status=active&limit=2');
    expect(active.status).toBe(200);
    expect(active.body.items.every((s: { status: string }) => s.status === 'active')).toBe(true);
    expect(active.body.items.length).toBeLessThanOrEqual(2);
    expect(active.body.total).toBeGreaterThanOrEqual(active.body.items.length);
    expect((await invoice.get('/subscriptions?status=nope')).status).toBe(422);
  });

  it('lists subscribers with search, per plan, and a subscriber with their subscriptions', async () => {
    const { id, planId } = await trialSub('findme@example.com');
    const found = await invoice.get('/subscribers?search=FINDME');
    expect(found.body.items).toHaveLength(1);
    expect(found.body.items[0]).not.toHaveProperty('access_token');
    const subscriberId = found.body.items[0].id;
    const detail = await invoice.get(`/subscribers/${subscriberId}`);
    expect(detail.body.subscriptions.map((s: { id: string }) => s.id)).toEqual([id]);
    const ofPlan = await invoice.get(`/plans/${planId}/subscribers`);
    expect(ofPlan.body).toMatchObject({ total: 1, items: [expect.objectContaining({ id: subscriberId })] });
    expect((await client(stack.api, other.invoice_key).get(`/subscribers/${subscriberId}`)).status).toBe(404);
  });

  it('manage link and portal: the subscriber lists and cancels their own subscriptions only', async () => {
    const mine = await trialSub('portal@example.com');
    const theirs = await trialSub('someone@example.com');
    const link = await admin.get(`/subscriptions/${mine.id}/manage-link`);
    expect(link.body).toEqual({ subscription_id: mine.id, subscriber_email: 'portal@example.com', manage_url: mine.manageUrl });
    const token = tokenOf(link.body.manage_url);
    const headers = { 'X-Subscriber-Token': token };
    expect((await anon.get('/public/manage/subscriptions')).status).toBe(401);
    expect((await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': 'f'.repeat(64) } })).status).toBe(401);
    const list = await anon.get('/public/manage/subscriptions', { headers });
    expect(list.status).toBe(200);
    expect(list.body.items).toEqual([expect.objectContaining({ id: mine.id, plan_name: 'Sub plan', has_access: true })]);
    expect(list.body.items[0]).not.toHaveProperty('wallet');
    expect((await anon.post(`/public/manage/subscription/${theirs.id}/cancel`, undefined, { headers })).status).toBe(404);
    expect((await invoice.get(`/subscriptions/${theirs.id}`)).body.status).toBe('active');
    const cancel = await anon.post(`/public/manage/subscription/${mine.id}/cancel`, undefined, { headers });
    expect(cancel.status).toBe(200);
    expect((await invoice.get(`/subscriptions/${mine.id}`)).body).toMatchObject({ status: 'cancelled', has_access: true, cancelled_by: 'subscriber' });
    expect((await invoice.get(`/subscriptions/${theirs.id}`)).body.cancelled_by).toBeNull();
    expect((await anon.get('/public/manage/subscriptions', { headers })).body.items[0].cancel_reason).toBe('cancelled by subscriber');

    // The owner's reason is a note for their records: the subscriber sees who cancelled, not the note.
    const again = await trialSub('portal-note@example.com');
    const note = 'INTERNAL: suspected fraud, see ticket 8812';
    expect((await admin.post(`/subscriptions/${again.id}/cancel`, { reason: note })).status).toBe(200);
    expect((await invoice.get(`/subscriptions/${again.id}`)).body).toMatchObject({ cancel_reason: note, cancelled_by: 'merchant' });
    const theirView = await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': tokenOf(again.manageUrl) } });
    expect(theirView.body.items[0]).toMatchObject({ id: again.id, status: 'cancelled', cancel_reason: 'cancelled by the merchant' });
    expect(JSON.stringify(theirView.body)).not.toContain('8812');
    // Nor does a note that reads like the service's own words (found from outside: it was taken for them).
    const misleading = await trialSub('portal-misleading@example.com');
    expect((await admin.post(`/subscriptions/${misleading.id}/cancel`, { reason: 'cancelled by subscriber' })).status).toBe(200);
    const misled = await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': tokenOf(misleading.manageUrl) } });
    expect(misled.body.items[0]).toMatchObject({ id: misleading.id, cancel_reason: 'cancelled by the merchant' });
  });

  it("portal notice switches: the subscriber's own subscription only, validated, kept, Idempotency-Key per token", async () => {
    const mine = await trialSub('switches@example.com');
    const theirs = await trialSub('switches-other@example.com');
    const headers = { 'X-Subscriber-Token': tokenOf(mine.manageUrl) };
    const path = (id: string) => `/public/manage/subscription/${id}`;
    expect((await anon.patch(path(mine.id), { receive_reminders: false })).status).toBe(401);
    // Another subscriber's subscription is as unknown as one that does not exist: same status, same words.
    const stranger = await anon.patch(path(theirs.id), { receive_reminders: false }, { headers });
    const unknown = await anon.patch(path('sub_nope'), { receive_reminders: false }, { headers });
    expect([stranger.status, unknown.status]).toEqual([404, 404]);
    expect(stranger.body).toEqual(unknown.body);
    expect((await invoice.get(`/subscriptions/${theirs.id}`)).body.receive_reminders).toBe(true);
    // Bad bodies: nothing to change, a wrong type, an unknown field (422 naming it), not JSON (400).
    for (const body of [{}, { receive_reminders: 'no' }, { receive_reminders: false, status: 'cancelled' }]) {
      const bad = await anon.patch(path(mine.id), body, { headers });
      expect(bad.status, JSON.stringify(body)).toBe(422);
      expect(Array.isArray(bad.body.detail)).toBe(true);
    }
    expect((await anon.patch(path(mine.id), undefined, { headers })).status).toBe(422);
    expect((await anon.patch(path(mine.id), undefined, { headers, raw: '{"receive_reminders":' })).status).toBe(400);

    const off = await anon.patch(path(mine.id), { receive_reminders: false }, { headers });
    expect(off.status, JSON.stringify(off.body)).toBe(200);
    expect(off.body).toMatchObject({ id: mine.id, plan_name: 'Sub plan', receive_reminders: false, receive_confirmations: true, status: 'active' });
    expect(off.body).not.toHaveProperty('metadata');
    expect((await invoice.get(`/subscriptions/${mine.id}`)).body).toMatchObject({ receive_reminders: false, receive_confirmations: true });
    const both = await anon.patch(path(mine.id), { receive_reminders: true, receive_confirmations: false }, { headers });
    expect(both.body).toMatchObject({ receive_reminders: true, receive_confirmations: false });
    const listed = (await anon.get('/public/manage/subscriptions', { headers })).body.items[0];
    expect(listed).toMatchObject({ id: mine.id, receive_reminders: true, receive_confirmations: false });
    const row = await db.query('SELECT receive_reminders, receive_confirmations FROM billing.subscriptions WHERE id = $1', [mine.id]);
    expect(row.rows[0]).toEqual({ receive_reminders: true, receive_confirmations: false });

    // An Idempotency-Key as on the portal's POSTs: replayed for the same request, 409 for another, and
    // scoped to the token (another subscriber's same key runs their own request).
    const key = { ...headers, 'Idempotency-Key': 'switch-1' };
    const first = await anon.patch(path(mine.id), { receive_confirmations: true }, { headers: key });
    expect(first.status).toBe(200);
    const replay = await anon.patch(path(mine.id), { receive_confirmations: true }, { headers: key });
    expect([replay.status, replay.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
    expect((await anon.patch(path(mine.id), { receive_confirmations: false }, { headers: key })).status).toBe(409);
    const theirsKey = { 'X-Subscriber-Token': tokenOf(theirs.manageUrl), 'Idempotency-Key': 'switch-1' };
    const other = await anon.patch(path(theirs.id), { receive_confirmations: false }, { headers: theirsKey });
    expect([other.status, other.headers.get('idempotent-replayed'), other.body.receive_confirmations]).toEqual([200, null, false]);
  });

  it('portal notice switches of an ended subscription are 409 and change nothing; ever_paid says whether it was paid (review findings)', async () => {
    const p = await plan({ name: 'Ending plan' });
    const paid = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'ending@example.com' })).body;
    const headers = { 'X-Subscriber-Token': tokenOf(paid.manage_url) };
    const path = `/public/manage/subscription/${paid.subscription_id}`;
    const listed = async () =>
      (await anon.get('/public/manage/subscriptions', { headers })).body.items.find((x: { id: string }) => x.id === paid.subscription_id);
    expect(await listed()).toMatchObject({ status: 'pending', ever_paid: false });
    expect((await anon.post(`/dev/payments/${paid.payment_id}/pay`)).status).toBe(200);
    await until(listed, (x) => x?.status === 'active');
    expect(await listed()).toMatchObject({ ever_paid: true });
    // Cancelled at the period's end: access goes on, but no renewal (so no reminder) and no payment follows.
    expect((await anon.post(`${path}/cancel`, undefined, { headers })).status).toBe(200);
    expect(await listed()).toMatchObject({ status: 'cancelled', has_access: true, ever_paid: true });
    const refused = await anon.patch(path, { receive_reminders: false, receive_confirmations: false }, { headers });
    expect(refused.status).toBe(409);
    expect(refused.body.detail).toMatch(/has ended \(cancelled\).*no more reminders or confirmations/);
    const row = await db.query('SELECT receive_reminders, receive_confirmations FROM billing.subscriptions WHERE id = $1', [paid.subscription_id]);
    expect(row.rows[0]).toMatchObject({ receive_reminders: true, receive_confirmations: true });

    // Cancelled before any payment: never paid; a trial never paid for neither.
    const unpaid = (
      await anon.post('/public/subscribe', { plan_id: (await plan({ name: 'Never' })).id, payment_method: 'lightning', email: 'ending@example.com' })
    ).body;
    expect((await admin.post(`/subscriptions/${unpaid.subscription_id}/cancel`, { immediate: true })).status).toBe(200);
    const trial = (
      await anon.post('/public/subscribe', {
        plan_id: (await plan({ name: 'Trial only', trial_days: 5 })).id,
        payment_method: 'lightning',
        email: 'ending@example.com',
      })
    ).body;
    const items = (await anon.get('/public/manage/subscriptions', { headers })).body.items as { id: string; ever_paid: boolean; status: string }[];
    expect(items.find((x) => x.id === unpaid.subscription_id)).toMatchObject({
      status: 'cancelled',
      ever_paid: false,
      in_trial: false,
      renewal_overdue: false,
    });
    // By the service's clock: whether its trial runs (the portal page tells a trial over from it).
    expect(items.find((x) => x.id === trial.subscription_id)).toMatchObject({ status: 'active', ever_paid: false, in_trial: true, renewal_overdue: false });
    expect(items.find((x) => x.id === paid.subscription_id)).toMatchObject({ in_trial: false, renewal_overdue: false });
    expect((await anon.patch(`/public/manage/subscription/${unpaid.subscription_id}`, { receive_reminders: false }, { headers })).status).toBe(409);
  });

  it("the owner's notice switches of an ended subscription are 409 as on the portal; its metadata stays the owner's (found from outside)", async () => {
    for (const immediate of [false, true]) {
      const { id } = await trialSub(`owner-ended-${immediate}@example.com`);
      expect((await admin.post(`/subscriptions/${id}/cancel`, { immediate })).status).toBe(200);
      for (const body of [{ receive_reminders: false }, { receive_confirmations: false }, { metadata: { crm: '7' }, receive_reminders: false }]) {
        const refused = await admin.put(`/subscriptions/${id}`, body);
        expect(refused.status, JSON.stringify(body)).toBe(409);
        expect(refused.body.detail).toBe('This subscription has ended (cancelled): it gets no more reminders or confirmations');
      }
      const row = await db.query('SELECT receive_reminders, receive_confirmations, metadata FROM billing.subscriptions WHERE id = $1', [id]);
      expect(row.rows[0]).toEqual({ receive_reminders: true, receive_confirmations: true, metadata: {} });
      // The owner's records: metadata changes, also when the switches are sent back as they are.
      const kept = await admin.put(`/subscriptions/${id}`, { metadata: { crm: '8' }, receive_reminders: true, receive_confirmations: true });
      expect(kept.status).toBe(200);
      expect(kept.body).toMatchObject({ status: 'cancelled', metadata: { crm: '8' }, receive_reminders: true, receive_confirmations: true });
    }
  });

  it("portal payments: the subscriber's own payments only, receipts and what pays an open one", async () => {
    const p = await plan({ name: 'Paid plan' });
    const mine = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'payer@example.com' })).body;
    const theirs = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'other-payer@example.com' })).body;
    const headers = { 'X-Subscriber-Token': tokenOf(mine.manage_url) };
    expect((await anon.get('/public/manage/payments')).status).toBe(401);
    expect((await anon.get('/public/manage/payments', { headers: { 'X-Subscriber-Token': 'f'.repeat(64) } })).status).toBe(401);
    expect((await anon.get('/public/manage/payments?limit=0', { headers })).status).toBe(422);
    const open = await anon.get('/public/manage/payments', { headers });
    expect(open.status).toBe(200);
    expect(open.body).toMatchObject({ total: 1, limit: 50, offset: 0 });
    expect(open.body.items).toEqual([
      expect.objectContaining({
        id: mine.payment_id,
        subscription_id: mine.subscription_id,
        plan_name: 'Paid plan',
        status: 'pending',
        amount_sats: 5000,
        payment_request: mine.payment_request,
        expires_at: mine.expires_at,
      }),
    ]);
    expect(JSON.stringify(open.body)).not.toContain(theirs.payment_id);
    expect(JSON.stringify(open.body)).not.toContain(w.id);
    expect((await anon.post(`/dev/payments/${mine.payment_id}/pay`)).status).toBe(200);
    const paid = await anon.get('/public/manage/payments', { headers });
    expect(paid.body.items[0]).toMatchObject({ id: mine.payment_id, status: 'paid', paid_at: expect.any(Number) });
  });

  it('archiving a plan cancels its live subscriptions, keeping access to the period end', async () => {
    const p = await plan({ trial_days: 5 });
    const ids: string[] = [];
    for (const e of ['a1@example.com', 'a2@example.com'])
      ids.push((await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: e })).body.subscription_id);
    await admin.post(`/subscriptions/${ids[1]}/cancel`);
    const res = await admin.del(`/plans/${p.id}`);
    expect(res.body).toMatchObject({ is_deleted: true, cancelled_subscriptions: 1 });
    expect((await invoice.get(`/subscriptions/${ids[0]}`)).body).toMatchObject({
      status: 'cancelled',
      has_access: true,
      cancel_reason: 'plan archived',
      cancelled_by: 'plan_archived',
    });
    // A second archive answers the same as the first, and emits nothing more.
    const again = await admin.del(`/plans/${p.id}`);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(res.body);
    // plan.archived names the subscription it ended (the WebhookEvent shape), once.
    const events = (await db.query(`SELECT payload FROM billing.outbox WHERE subject = 'events.plan.archived' AND payload->'data'->>'plan_id' = $1`, [p.id]))
      .rows;
    expect(events.map((r: { payload: { data: unknown } }) => r.payload.data)).toEqual([
      expect.objectContaining({ subscription_id: ids[0], plan_id: p.id, status: 'archived', subscriber_email: 'a1@example.com', cancelled_subscriptions: 1 }),
    ]);
    expect((await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'late@example.com' })).status).toBe(404);
  });
});
