import { request } from 'node:http';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { connect } from '@nats-io/transport-node';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { client } from './support/http.js';
import { newWallets } from './support/stack.js';

/**
 * How the gateway serves the hosted pages, through HTTP alone (so it is checked where no browser is
 * installed too; test/pages.e2e.test.ts drives them in chromium).
 */
const stack = inject('stack');
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** A GET whose body is the bytes on the wire (fetch would decompress them). */
function raw(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, string | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    request(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers as Record<string, string | undefined>, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

describe('hosted pages', () => {
  let admin: ReturnType<typeof client>;
  let adminKey = '';
  /** A plan on offer: its checkout address is the page. */
  let offered = '';
  beforeAll(async () => {
    adminKey = (await newWallets(stack.databaseUrl, 1))[0]!.admin_key;
    admin = client(stack.api, adminKey);
    const res = await admin.post('/plans', { name: 'Page plan', amount_sats: 1000, interval: 'monthly' });
    expect(res.status).toBe(201);
    offered = res.body.id;
  });
  const pages = [
    ['checkout', () => `${stack.gatewayUrl}/subscriptions_manager/checkout/${offered}`, 'checkout-'],
    ['portal', () => `${stack.gatewayUrl}/subscriptions_manager/manage?token=${'a'.repeat(64)}`, 'manage-'],
    ['API reference', () => `${stack.api}/docs`, 'docs-'],
  ] as const;

  it.each(pages)('%s: HTML under a strict CSP, revalidated on each visit, never framed, no referrer', async (_name, url, script) => {
    const res = await fetch(url());
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('content-security-policy')).toBe(CSP);
    expect(res.headers.get('cache-control')).toBe('no-cache');
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    const html = await res.text();
    // No inline script: the CSP would refuse it.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    const asset = html.match(new RegExp(`src="(/subscriptions_manager/assets/${script}[^"]+\\.js)"`))?.[1];
    expect(asset).toBeTruthy();
    const js = await fetch(`${stack.gatewayUrl}${asset}`);
    expect(js.status).toBe(200);
    expect(js.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(js.headers.get('content-security-policy')).toBe(CSP);
  });

  it('pages and assets go brotli- or gzip-compressed to clients that accept it, as they are to others', async () => {
    const html = await (await fetch(`${stack.api}/docs`)).text();
    // Swagger UI's bundle, the largest asset.
    const url = `${stack.gatewayUrl}${html.match(/src="(\/subscriptions_manager\/assets\/docs-[^"]+\.js)"/)![1]}`;
    const plain = await raw(url);
    expect(plain.status).toBe(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.headers.vary).toMatch(/Accept-Encoding/i);
    expect(plain.body.length).toBeGreaterThan(1_000_000);
    const br = await raw(url, { 'accept-encoding': 'br' });
    expect(br.headers['content-encoding']).toBe('br');
    expect(brotliDecompressSync(br.body).equals(plain.body)).toBe(true);
    expect(br.body.length).toBeLessThan(plain.body.length / 3);
    const gz = await raw(url, { 'accept-encoding': 'gzip' });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(gz.body).equals(plain.body)).toBe(true);
    // A browser accepts both: brotli, the smaller.
    const both = await raw(url, { 'accept-encoding': 'gzip, deflate, br, zstd' });
    expect(both.headers['content-encoding']).toBe('br');
    expect(Number(both.headers['content-length'])).toBe(br.body.length);
    // Refused by weight: as it is.
    expect((await raw(url, { 'accept-encoding': 'br;q=0, gzip;q=0' })).headers['content-encoding']).toBeUndefined();
    for (const r of [plain, br, gz]) {
      expect(r.headers['cache-control']).toBe('public, max-age=31536000, immutable');
      expect(r.headers['content-type']).toBe('text/javascript; charset=utf-8');
      expect(r.headers['content-security-policy']).toBe(CSP);
      expect(r.headers.etag).toBe(plain.headers.etag);
    }
    expect(plain.headers.etag).toMatch(/^W\/"/);
    expect((await raw(url, { 'accept-encoding': 'br', 'if-none-match': plain.headers.etag! })).status).toBe(304);

    for (const [name, page] of pages) {
      const identity = await raw(page());
      const zipped = await raw(page(), { 'accept-encoding': 'gzip' });
      expect(zipped.headers['content-encoding'], name).toBe('gzip');
      expect(zipped.headers.vary, name).toMatch(/Accept-Encoding/i);
      expect(zipped.headers['cache-control'], name).toBe('no-cache');
      expect(gunzipSync(zipped.body).equals(identity.body), name).toBe(true);
      expect(identity.headers['content-encoding'], name).toBeUndefined();
    }
  });

  it('the OpenAPI document the reference loads goes compressed and is revalidated, not sent whole each visit (found from outside)', async () => {
    const url = `${stack.api}/openapi.json`;
    const plain = await raw(url);
    expect(plain.status).toBe(200);
    expect(plain.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(JSON.parse(plain.body.toString('utf8')).openapi).toMatch(/^3\./);
    const gz = await raw(url, { 'accept-encoding': 'gzip' });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(gz.body).equals(plain.body)).toBe(true);
    expect(gz.body.length).toBeLessThan(plain.body.length / 5);
    for (const r of [plain, gz]) {
      expect(r.headers['cache-control']).toBe('no-cache');
      expect(r.headers.etag).toBe(plain.headers.etag);
    }
    expect((await raw(url, { 'accept-encoding': 'gzip', 'if-none-match': plain.headers.etag! })).status).toBe(304);
  });

  /** What a browser sends when a person opens a link. */
  const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8';

  it("a checkout address that names no plan, or a plan not on offer, answers 404 with the page's words to all but JSON clients (found from outside: 200)", async () => {
    const archived = (await admin.post('/plans', { name: 'Gone plan', amount_sats: 1000, interval: 'monthly' })).body.id as string;
    expect((await admin.del(`/plans/${archived}`)).status).toBe(200);
    const noPlan = /<main[^>]*>\s*<h1>Plan not found<\/h1>\s*<p>This checkout link names no plan\. Please ask the seller for the right link\.<\/p>/;
    const notOffered =
      /<main[^>]*>\s*<h1>Plan not found<\/h1>\s*<p>This plan does not exist or is no longer offered\. Please ask the seller for a current link\.<\/p>/;
    for (const [path, words] of [
      ['/subscriptions_manager/checkout', noPlan],
      ['/subscriptions_manager/checkout/', noPlan],
      ['/subscriptions_manager/checkout/plan_01JUNKJUNKJUNKJUNKJUNKJUNK', notOffered],
      ['/subscriptions_manager/checkout/nothing-like-an-id', notOffered],
      [`/subscriptions_manager/checkout/${'x'.repeat(300)}`, notOffered],
      ['/subscriptions_manager/checkout/plan%00x', notOffered],
      // More after the plan id: a checkout link that names no plan either.
      ['/subscriptions_manager/checkout//', noPlan],
      ['/subscriptions_manager/checkout/plan_01abc/more', noPlan],
      [`/subscriptions_manager/checkout/${archived}`, notOffered],
      // Naming a payment, a plan that never was is no page either (found in review: 200 for any id).
      ['/subscriptions_manager/checkout/plan_01JUNKJUNKJUNKJUNKJUNKJUNK?payment=pay_01JUNKJUNKJUNKJUNKJUNKJUNK', notOffered],
      ['/subscriptions_manager/checkout/nothing-like-an-id?payment=x', notOffered],
    ] as const) {
      for (const accept of [BROWSER, '*/*', undefined]) {
        const res = await fetch(`${stack.gatewayUrl}${path}`, { headers: accept ? { Accept: accept } : {} });
        expect([res.status, res.headers.get('content-type')], `${path} ${accept}`).toEqual([404, 'text/html; charset=utf-8']);
        expect(res.headers.get('content-security-policy'), path).toBe(CSP);
        expect(res.headers.get('cache-control'), path).toBe('no-store');
        const html = await res.text();
        expect(html, path).toContain('<title>Plan not found</title>');
        expect(html, path).toMatch(words);
        expect(html, path).not.toMatch(/<script/);
      }
      const api = await fetch(`${stack.gatewayUrl}${path}`, { headers: { Accept: 'application/json' } });
      expect([api.status, await api.json()], path).toEqual([404, { detail: 'Not Found' }]);
    }
    // The plan on offer is its page, for every client; a withdrawn one's naming a payment too (its script
    // says what became of that payment).
    for (const [path, accept] of [
      ...[BROWSER, '*/*', 'application/json'].map((a) => [offered, a] as const),
      [`${archived}?payment=pay_01JUNKJUNKJUNKJUNKJUNKJUNK`, BROWSER] as const,
    ]) {
      const res = await fetch(`${stack.gatewayUrl}/subscriptions_manager/checkout/${path}`, { headers: { Accept: accept } });
      expect([res.status, res.headers.get('content-type')], accept).toEqual([200, 'text/html; charset=utf-8']);
      expect(await res.text(), accept).toMatch(/src="\/subscriptions_manager\/assets\/checkout-[^"]+\.js"/);
    }
  });

  it("a checkout page's look-up of its plan asks billing for the plan alone, not the notifier and payments for the page's courtesies (the page asks for those itself)", async () => {
    const nc = await connect({ servers: stack.natsUrl, ...stack.natsOperator });
    try {
      // Copies of every request that names this plan, on the look-up's subject and the courtesies' subjects.
      const seen: string[] = [];
      // (This plan has no fiat rail: payments is not asked for a fiat price either way.)
      for (const subject of ['billing.internal.plan_offered', 'notifier.internal.contact_methods', 'billing.public.>']) {
        const sub = nc.subscribe(subject);
        (async () => {
          for await (const m of sub) if (m.string().includes(offered)) seen.push(m.subject);
        })();
      }
      await nc.flush();
      for (let i = 0; i < 3; i++) {
        const res = await fetch(`${stack.gatewayUrl}/subscriptions_manager/checkout/${offered}`, { headers: { Accept: BROWSER } });
        expect(res.status).toBe(200);
        await res.text();
      }
      await nc.flush();
      await new Promise((r) => setTimeout(r, 300));
      expect(seen).toEqual(['billing.internal.plan_offered', 'billing.internal.plan_offered', 'billing.internal.plan_offered']);
    } finally {
      await nc.close();
    }
  });

  it('an address under the checkout or portal path that names nothing is the page\'s own "not found" for a browser, JSON for others (found from outside)', async () => {
    for (const [path, title] of [
      ['/subscriptions_manager/checkout/plan_01abc/extra', 'Plan not found'],
      ['/subscriptions_manager/checkout/%ED%A0%80', 'Plan not found'],
      ['/subscriptions_manager/checkout/plan_01abc/%ED%A0%80', 'Plan not found'],
      ['/subscriptions_manager/manage/extra', 'Page not found'],
      ['/subscriptions_manager/manage/%ED%A0%80', 'Page not found'],
    ] as const) {
      const res = await fetch(`${stack.gatewayUrl}${path}`, { headers: { Accept: BROWSER } });
      expect([res.status, res.headers.get('content-type')], path).toEqual([404, 'text/html; charset=utf-8']);
      expect(res.headers.get('content-security-policy'), path).toBe(CSP);
      const html = await res.text();
      expect(html, path).toContain(`<title>${title}</title>`);
      expect(html, path).toMatch(new RegExp(`<main[^>]*>\\s*<h1>${title}</h1>`));
      // Words alone: no script to wait for.
      expect(html, path).not.toMatch(/<script/);
      const api = await fetch(`${stack.gatewayUrl}${path}`, { headers: { Accept: 'application/json' } });
      expect([api.status, await api.json()], path).toEqual([404, { detail: 'Not Found' }]);
    }
  });

  it('a List-Unsubscribe link that is not ours says so to a browser, read or posted without JavaScript; API clients get the JSON as before (found from outside)', async () => {
    const url = `${stack.api}/public/unsubscribe/sub_x.reminders.${'A'.repeat(43)}`;
    const form = { 'Content-Type': 'application/x-www-form-urlencoded' };
    for (const init of [{ headers: { Accept: BROWSER } }, { method: 'POST', headers: { ...form, Accept: BROWSER }, body: 'List-Unsubscribe=One-Click' }]) {
      const res = await fetch(url, init);
      expect([res.status, res.headers.get('content-type')], init.method).toEqual([404, 'text/html; charset=utf-8']);
      expect(res.headers.get('content-security-policy')).toBe(CSP);
      const html = await res.text();
      expect(html, init.method).toMatch(/<main[^>]*>\s*<h1>This link does not work<\/h1>\s*<p>The link is not one we sent, or it was changed on the way\./);
      // Nothing to press (found from outside: the no-script form was there for a link that is not ours).
      expect(html, init.method).not.toMatch(/<form|<button|<script/);
    }
    // A mail program's one-click POST (RFC 8058) and other API clients: the JSON, unchanged.
    for (const headers of [form, { ...form, Accept: '*/*' }, { ...form, Accept: 'application/json' }]) {
      const res = await fetch(url, { method: 'POST', headers, body: 'List-Unsubscribe=One-Click' });
      expect([res.status, res.headers.get('content-type'), await res.json()]).toEqual([
        404,
        'application/json; charset=utf-8',
        { detail: 'Subscription not found' },
      ]);
    }
  });

  it('a List-Unsubscribe link cut short (no token, or more after it) is the same page to a browser, not raw JSON (found from outside)', async () => {
    for (const tail of ['', '/', '/sub_x.reminders/more']) {
      const url = `${stack.api}/public/unsubscribe${tail}`;
      const res = await fetch(url, { headers: { Accept: BROWSER } });
      expect([res.status, res.headers.get('content-type')], tail).toEqual([404, 'text/html; charset=utf-8']);
      expect(await res.text(), tail).toMatch(/<main[^>]*>\s*<h1>This link does not work<\/h1>/);
      const api = await fetch(url, { headers: { Accept: 'application/json' } });
      expect([api.status, await api.json()], tail).toEqual([404, { detail: 'Not Found' }]);
    }
  });

  it('a List-Unsubscribe link whose token is too long, or not text, does not work either: the same 404 page, no button (found from outside: "try again")', async () => {
    const form = { 'Content-Type': 'application/x-www-form-urlencoded' };
    for (const token of ['a'.repeat(201), `sub_x.reminders.${'A'.repeat(400)}`, 'a%00b', '%ED%A0%80']) {
      const url = `${stack.api}/public/unsubscribe/${token}`;
      for (const init of [{ headers: { Accept: BROWSER } }, { method: 'POST', headers: { ...form, Accept: BROWSER }, body: 'List-Unsubscribe=One-Click' }]) {
        const res = await fetch(url, init);
        const what = `${init.method ?? 'GET'} ${token.slice(0, 20)}`;
        expect([res.status, res.headers.get('content-type')], what).toEqual([404, 'text/html; charset=utf-8']);
        const html = await res.text();
        expect(html, what).toMatch(/<main[^>]*>\s*<h1>This link does not work<\/h1>/);
        expect(html, what).not.toMatch(/<form|<button|<script/);
      }
      for (const method of ['GET', 'POST']) {
        const res = await fetch(url, {
          method,
          headers: { ...form, Accept: 'application/json' },
          body: method === 'POST' ? 'List-Unsubscribe=One-Click' : undefined,
        });
        expect(res.status, `${method} ${token.slice(0, 20)}`).toBe(404);
      }
    }
  });

  it("the API's answers are kept by no cache: the portal's, chosen by a token header, owners', public ones and errors (found from outside: none said so)", async () => {
    const checkout = await client(stack.api).post('/public/subscribe', { plan_id: offered, payment_method: 'lightning', email: 'cached@example.com' });
    expect(checkout.status).toBe(201);
    const token = new URL(checkout.body.manage_url).searchParams.get('token')!;
    const answers = [
      await fetch(`${stack.api}/public/manage/subscriptions`, { headers: { 'X-Subscriber-Token': token } }),
      await fetch(`${stack.api}/plans`, { headers: { 'X-Api-Key': adminKey } }),
      await fetch(`${stack.api}/public/plan/${offered}`),
      await fetch(`${stack.api}/public/payment/${checkout.body.payment_id}/status`),
      await fetch(`${stack.api}/plans/plan_01JUNKJUNKJUNKJUNKJUNKJUNK`, { headers: { 'X-Api-Key': adminKey } }),
      await fetch(`${stack.api}/plans`),
    ];
    expect(answers.map((r) => [r.status, r.headers.get('cache-control')])).toEqual([
      [200, 'no-store'],
      [200, 'no-store'],
      [200, 'no-store'],
      [200, 'no-store'],
      [404, 'no-store'],
      [401, 'no-store'],
    ]);
    // The pages and the OpenAPI document keep theirs (revalidated).
    expect((await fetch(`${stack.api}/openapi.json`)).headers.get('cache-control')).toBe('no-cache');
  });

  it('serves nothing outside the built assets', async () => {
    for (const path of [
      '/subscriptions_manager/assets/nope.js',
      '/subscriptions_manager/assets/..%2f..%2fpackage.json',
      '/subscriptions_manager/assets/%2e%2e/checkout.html',
      '/subscriptions_manager/web/dist/checkout.html',
    ]) {
      const res = await fetch(`${stack.gatewayUrl}${path}`);
      expect(res.status, path).toBe(404);
      expect(await res.json(), path).toEqual({ detail: 'Not Found' });
    }
  });
});
