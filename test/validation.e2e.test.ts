import { beforeAll, describe, expect, inject, it } from 'vitest';
import { newWallets, type WalletKeys } from './support/stack.js';

const stack = inject('stack');
let w: WalletKeys;
beforeAll(async () => {
  [w] = (await newWallets(stack.databaseUrl, 1)) as [WalletKeys];
});

/** The 422's body as sent, and its size in bytes. */
async function refused(method: string, path: string, raw: string, key?: string) {
  const res = await fetch(`${stack.api}${path}`, {
    method,
    headers: { 'Content-Type': 'application/json', ...(key ? { 'X-Api-Key': key } : {}) },
    body: raw,
  });
  const text = await res.text();
  return { status: res.status, bytes: Buffer.byteLength(text), detail: JSON.parse(text).detail as Array<{ loc: unknown[]; msg: string; type: string }> };
}

describe('422 answers stay small whatever the request (found from outside: 60 KB asked for a 15 MB answer)', () => {
  it('a list of 30,000 wrong event names is answered in a few KB naming the first, and the enum is listed once', async () => {
    const raw = JSON.stringify({ url: 'https://1.1.1.1/x', events: Array(30_000).fill(0) });
    const r = await refused('POST', '/webhook-endpoints', raw, w.admin_key);
    expect(r.status).toBe(422);
    expect(r.bytes).toBeLessThan(8 * 1024);
    expect(r.detail[0]!.loc.slice(0, 2)).toEqual(['body', 'events']);
    // Every issue is the usual shape, the last one included (it says what was left out).
    for (const d of r.detail) expect(Object.keys(d).sort()).toEqual(['loc', 'msg', 'type']);
  });

  it('a few wrong event names are each named, the allowed names said once', async () => {
    const raw = JSON.stringify({ url: 'https://1.1.1.1/x', events: [0, 'nope', 'subscription.created', 'also.nope'] });
    const r = await refused('POST', '/webhook-endpoints', raw, w.admin_key);
    expect(r.status).toBe(422);
    expect(r.detail.map((d) => d.loc)).toEqual([
      ['body', 'events', 0],
      ['body', 'events', 1],
      ['body', 'events', 3],
    ]);
    expect(r.detail[0]!.msg).toContain('"subscription.created"');
    for (const d of r.detail.slice(1)) expect(d.msg).not.toContain('"subscription.created"');
  });

  it('6,500 unknown fields without a key are answered in a few KB naming the first and counting the rest', async () => {
    const fields = Object.fromEntries(Array.from({ length: 6_500 }, (_, i) => [`k${i}`, 1]));
    const raw = JSON.stringify({ plan_id: 'plan_x', payment_method: 'lightning', ...fields });
    const r = await refused('POST', '/public/subscribe', raw);
    expect(r.status).toBe(422);
    expect(r.bytes).toBeLessThan(8 * 1024);
    expect(r.detail[0]).toEqual({ loc: ['body', 'k0'], msg: 'Unrecognized field', type: 'unrecognized_keys' });
    expect(r.detail.length).toBeLessThanOrEqual(21);
    const rest = r.detail.at(-1)!;
    expect(rest.loc).toEqual(['body']);
    expect(rest.msg).toMatch(new RegExp(`^${6_500 - (r.detail.length - 1)} more issues left out`));
  });

  it('1,000 wrong metadata values are answered in a few KB naming the first', async () => {
    const metadata = Object.fromEntries(Array.from({ length: 1_000 }, (_, i) => [`k${i}`, i]));
    const r = await refused('PUT', '/subscriptions/sub_none', JSON.stringify({ metadata }), w.admin_key);
    expect(r.status).toBe(422);
    expect(r.bytes).toBeLessThan(8 * 1024);
    expect(r.detail[0]!.loc).toEqual(['body', 'metadata', 'k0']);
  });
});

describe('a key given twice in one object is refused, not taken as its last (found from outside)', () => {
  it('422 naming it, on owner and public routes, nested too, and nothing is created; a key name inside a value is fine', async () => {
    const plans = async () => (await (await fetch(`${stack.api}/plans?limit=200`, { headers: { 'X-Api-Key': w.invoice_key } })).json()).items.length;
    const before = await plans();
    const flat = await refused('POST', '/plans', '{"name":"a","name":"b","amount_sats":1000,"interval":"weekly"}', w.admin_key);
    expect(flat.status).toBe(422);
    expect(flat.detail).toEqual([{ loc: ['body', 'name'], msg: 'Duplicate key: each key may appear once in an object', type: 'key_duplicate' }]);
    // Written differently, the same key.
    const escaped = await refused('POST', '/plans', '{"name":"a","amount_sats":1000,"amount_\\u0073ats":2,"interval":"weekly"}', w.admin_key);
    expect(escaped.detail.map((d) => d.loc)).toEqual([['body', 'amount_sats']]);
    const nested = await refused('POST', '/plans', '{"name":"a","amount_sats":1000,"interval":"weekly","metadata":{"tier":"gold","tier":"free"}}', w.admin_key);
    expect(nested.detail.map((d) => d.loc)).toEqual([['body', 'metadata', 'tier']]);
    const pub = await refused('POST', '/public/subscribe', '{"plan_id":"plan_x","payment_method":"lightning","email":"a@example.com","email":"b@example.com"}');
    expect(pub.status).toBe(422);
    expect(pub.detail.map((d) => d.loc)).toEqual([['body', 'email']]);
    expect(await plans()).toBe(before);
    // A key's name inside a value is no duplicate.
    const ok = await fetch(`${stack.api}/plans`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Api-Key': w.admin_key },
      body: '{"name":"\\"name\\": \\"b\\"","amount_sats":1000,"interval":"weekly","description":"{\\"amount_sats\\":2}"}',
    });
    expect(ok.status).toBe(201);
    expect((await ok.json()).name).toBe('"name": "b"');
    expect(await plans()).toBe(before + 1);
  });
});
