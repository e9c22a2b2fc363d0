import { describe, expect, inject, it } from 'vitest';

/**
 * How the gateway serves the hosted pages, through HTTP alone (so it is checked where no browser is
 * installed too; test/pages.e2e.test.ts drives them in chromium).
 */
const stack = inject('stack');
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

describe('hosted pages', () => {
  const pages = [
    ['checkout', `${stack.gatewayUrl}/subscriptions_manager/checkout/plan_01abc`, 'checkout-'],
    ['portal', `${stack.gatewayUrl}/subscriptions_manager/manage?token=${'a'.repeat(64)}`, 'manage-'],
    ['API reference', `${stack.api}/docs`, 'docs-'],
  ] as const;

  it.each(pages)('%s: HTML under a strict CSP, revalidated on each visit, never framed, no referrer', async (_name, url, script) => {
    const res = await fetch(url);
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

  it('serves nothing outside the built assets', async () => {
    for (const path of [
      '/subscriptions_manager/assets/nope.js',
      '/subscriptions_manager/assets/..%2f..%2fpackage.json',
      '/subscriptions_manager/assets/%2e%2e/checkout.html',
      '/subscriptions_manager/checkout',
      '/subscriptions_manager/web/dist/checkout.html',
    ]) {
      const res = await fetch(`${stack.gatewayUrl}${path}`);
      expect(res.status, path).toBe(404);
      expect(await res.json(), path).toEqual({ detail: 'Not Found' });
    }
  });
});
