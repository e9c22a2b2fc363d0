import { readFileSync } from 'node:fs';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import * as nip19 from 'nostr-tools/nip19';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
// The same launcher `npm start` uses.
import { freePort } from '../scripts/stack.mjs';
import { axeViolations, CHROMIUM, DESKTOP, hiddenLiveRegions, launch, openPage, overflowsHorizontally, PHONE, screenshots } from './support/browser.js';
import { client, until } from './support/http.js';
import { startNostrRelay, type NostrRelay } from './support/nostr-relay.js';
import { startNwcWallet, type NwcWallet } from './support/nwc-wallet.js';
import { startSmtpServer } from './support/smtp-server.js';
import { startStack, type Stack } from './support/stack.js';
import { startTelegramServer, type TelegramServer } from './support/telegram-server.js';

const BOT_TOKEN = '7101:AAH-pages-bot-token-secret-0123456789';
/** The service's one 409 detail for a contact that already subscribed to the plan, paid or not. */
const SUBSCRIBED_DETAIL =
  "This contact already has a subscription or a checkout of this plan. If it was paid, its link to manage it was shown when it started (and is in the seller's messages about it, if any); if not, it stays open until it is paid or expires, within 24 hours of its start";
/** A seller's plan name in a right-to-left script, its punctuation at its end (its left side). */
const RTL_NAME = 'الاشتراك الذهبي (شهري)!';
/** The checkout's help for a 409 not held by the tab, on a plan without channels: paid or not, the same. */
const NEUTRAL_HELP =
  'This contact already has a subscription or a checkout of this plan. If it was paid, its link to manage it (and to pay a renewal that is due) was shown when it started; the seller can send it to you again. If not, pay it where it was started, or wait until it expires (within 24 hours) and start again here.';

/**
 * The hosted pages in a real browser (Debian's chromium through playwright-core) against the whole
 * stack: checkout by every method paid with the dev provider, the portal it links to, an expired
 * invoice replaced, NWC on the relay and wallet of test/support, contacts by Telegram (the local Bot API
 * server) or Nostr alone, the API reference. Each page passes
 * axe-core without serious violations, shows no console error (CSP violations included), fits a
 * 360 px screen, and is captured at phone and desktop size under test-artifacts/pages/.
 */
if (!CHROMIUM) console.warn('pages.e2e: chromium not found (apt-get install chromium, or set CHROMIUM_PATH): browser tests skipped');

describe('checkout page weight', () => {
  it("the checkout page's JavaScript is well under 100 KB compressed", () => {
    const dist = join(import.meta.dirname, '..', 'web', 'dist');
    const html = readFileSync(join(dist, 'checkout.html'), 'utf8');
    const scripts = [...html.matchAll(/(?:src|href)="\/subscriptions_manager\/(assets\/[^"]+\.js)"/g)].map((m) => m[1]!);
    expect(scripts.length).toBeGreaterThan(0);
    const gzipped = scripts.reduce((n, f) => n + gzipSync(readFileSync(join(dist, f))).length, 0);
    expect(gzipped).toBeLessThan(30_000);
  });
});

// CI installs chromium (.ci/run): there a missing browser is a failure, not a skip; elsewhere a machine
// without it only skips the browser tests.
it.skipIf(!CHROMIUM && !process.env.CI)('chromium is installed for the browser tests', () => {
  expect(CHROMIUM, 'no chromium at /usr/bin/chromium or CHROMIUM_PATH').toBeDefined();
});

describe.skipIf(!CHROMIUM)('hosted pages in chromium', () => {
  let stack: Stack;
  let relay: NostrRelay;
  let tg: TelegramServer;
  /** Where the plans made with planWithMessages send their mail. */
  let mailbox: Awaited<ReturnType<typeof startSmtpServer>>;
  let browser: Browser;
  let phone: BrowserContext;
  let admin: ReturnType<typeof client>;
  let anon: ReturnType<typeof client>;
  const nwcWallets: NwcWallet[] = [];

  beforeAll(async () => {
    // Portal and checkout links are made from PUBLIC_BASE_URL: the gateway gets that port.
    const port = await freePort();
    [relay, tg, mailbox] = await Promise.all([startNostrRelay(), startTelegramServer([BOT_TOKEN]), startSmtpServer('portal', 'portal-pass')]);
    [stack, browser] = await Promise.all([
      startStack({
        wallets: 1,
        gatewayPort: port,
        env: {
          PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
          ONCHAIN_PROVIDER: 'dev',
          CARDPROC_PROVIDER: 'dev',
          WALLETPROC_PROVIDER: 'dev',
          FIAT_RATE_FIXED: '100000',
          NWC_INFO_TIMEOUT_MS: '3000',
          NWC_REPLY_TIMEOUT_MS: '4000',
          SCHEDULER_INTERVAL_MS: '1000',
          // The Telegram server and the relay of test/support are on loopback.
          MESSENGER_API_URL: tg.url,
          MESSENGER_POLL_MS: '300',
          NOTIFIER_POLL_INTERVAL_MS: '200',
          WEBHOOK_ALLOW_PRIVATE: '1',
        },
      }),
      launch(),
    ]);
    admin = client(stack.api, stack.wallets[0]!.admin_key);
    anon = client(stack.api);
    phone = await browser.newContext({ viewport: PHONE, isMobile: true, hasTouch: true });
  });
  afterAll(async () => {
    await browser?.close();
    await Promise.all(nwcWallets.map((w) => w.stop()));
    await stack?.stop();
    await relay?.stop();
    await tg?.stop();
    await mailbox?.stop();
  });

  async function plan(body: Record<string, unknown>) {
    const res = await admin.post('/plans', { interval: 'monthly', ...body });
    expect(res.status).toBe(201);
    const pub = await anon.get(`/public/plan/${res.body.id}`);
    expect(pub.body.checkout_url).toBe(`${stack.gatewayUrl}/subscriptions_manager/checkout/${res.body.id}`);
    return pub.body as { id: string; name: string; checkout_url: string; amount_sats: number };
  }

  /** A plan whose seller sends messages (e-mail, to this file's mail server): its portal card offers the notice switches. */
  async function planWithMessages(body: Record<string, unknown>) {
    const p = await plan(body);
    const put = await admin.put(`/plans/${p.id}/notification-settings`, { inherit: false, channels: { email: { smtp_url: mailbox.url } } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    return p;
  }

  /** Checks a page as a person with a screen reader, a keyboard or a phone would meet it. */
  async function check(page: Page, problems: string[], name: string, fullPage = true) {
    expect(await axeViolations(page)).toEqual([]);
    expect(await overflowsHorizontally(page)).toBe(false);
    expect(await hiddenLiveRegions(page)).toEqual([]);
    expect(problems).toEqual([]);
    await screenshots(page, name, fullPage);
  }

  /** Fills the checkout form for `method` and submits it; answers the checkout the API gave the page. */
  async function checkout(page: Page, method: string, email: string) {
    await page.getByRole('radio', { name: method }).check();
    await page.getByLabel('E-mail').fill(email);
    const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await page.getByRole('button', { name: /Continue to payment|Start free trial/ }).click();
    const res = await answer;
    expect(res.status()).toBe(201);
    return (await res.json()) as {
      payment_id: string;
      subscription_id: string;
      manage_url?: string;
      payment_request?: string;
      checkout_url?: string;
      onchain_address?: string;
      contacts_unchanged?: boolean;
    };
  }

  async function pay(paymentId: string) {
    expect((await anon.post(`/dev/payments/${paymentId}/pay`)).status).toBe(200);
  }

  /** Every console error of a page, the 4xx answers `openPage` lets through included (a missing favicon is one). */
  function allConsoleErrors(page: Page): string[] {
    const errors: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`${m.text()} ${m.location().url}`);
    });
    page.on('response', (r) => {
      if (r.status() >= 400) errors.push(`${r.status()} ${r.url()}`);
    });
    return errors;
  }

  /** The WCAG contrast ratio of two computed colours (`rgb(r, g, b)`). */
  function contrast(a: string, b: string): number {
    const luminance = (c: string) => {
      const [r, g, bl] = c
        .match(/[\d.]+/g)!
        .slice(0, 3)
        .map((v) => {
          const x = Number(v) / 255;
          return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4;
        }) as [number, number, number];
      return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
    };
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x) as [number, number];
    return (hi + 0.05) / (lo + 0.05);
  }

  /** The focused element's outline colour, and the background of the nearest ancestor that has one. */
  function focusRing(page: Page) {
    return page.evaluate(() => {
      const el = document.activeElement as HTMLElement;
      const style = getComputedStyle(el);
      let bg = 'rgb(255, 255, 255)';
      for (let n: HTMLElement | null = el.parentElement; n; n = n.parentElement) {
        const c = getComputedStyle(n).backgroundColor;
        if (c && c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') {
          bg = c;
          break;
        }
      }
      return { id: el.id || el.textContent?.trim(), style: style.outlineStyle, width: style.outlineWidth, color: style.outlineColor, bg };
    });
  }

  it('API reference at {api}/docs renders every operation of our OpenAPI document', async () => {
    const { page, problems } = await openPage(await browser.newContext({ viewport: DESKTOP }));
    const errors = allConsoleErrors(page);
    const res = await page.goto(`${stack.api}/docs`);
    expect(res!.status()).toBe(200);
    expect(res!.headers()['content-security-policy']).toBe(
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    );
    expect(res!.headers()['cache-control']).toBe('no-cache');
    // Assets have content hashes in their names: cached for a year.
    const asset = (await res!.text()).match(/src="(\/subscriptions_manager\/assets\/docs-[^"]+\.js)"/)![1]!;
    const got = await fetch(`${stack.gatewayUrl}${asset}`);
    expect(got.status).toBe(200);
    expect(got.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(got.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect((await fetch(`${stack.gatewayUrl}/subscriptions_manager/assets/nope.js`)).status).toBe(404);
    // Swagger UI lists the outgoing webhooks (one operation per event) after the paths.
    const doc = (await anon.get('/openapi.json')).body as {
      paths: Record<string, Record<string, unknown>>;
      webhooks?: Record<string, Record<string, unknown>>;
    };
    const count = (items: Record<string, Record<string, unknown>> = {}) => Object.values(items).reduce((n, p) => n + Object.keys(p).length, 0);
    const operations = count(doc.paths) + count(doc.webhooks);
    await expect.poll(() => page.locator('.opblock').count(), { timeout: 20_000 }).toBe(operations);
    await expect.poll(() => page.locator('.opblock-summary-path').allTextContents()).toContain('/public/subscribe');
    // One h1 (Swagger UI's title replaces the page's own), and no heading level skipped below it.
    expect.soft(await page.getByRole('heading', { level: 1 }).allTextContents()).toEqual([expect.stringContaining('Subscriptions manager')]);
    // Moderate violations too (found from outside: skipped heading levels, content outside landmarks).
    expect.soft(await axeViolations(page, 'moderate')).toEqual([]);
    // The reference is long: its first screen is enough to look at.
    await check(page, problems, 'api-reference', false);
    // Keyboard: an operation opens with Enter, and its details pass axe too.
    await page.locator('.opblock-summary-control').first().focus();
    await page.keyboard.press('Enter');
    await expect.poll(() => page.locator('.opblock.is-open').count()).toBe(1);
    expect.soft(await axeViolations(page, 'moderate')).toEqual([]);
    // Its response schema too (found from outside: a nameless toggle, text too faint).
    await page.locator('.opblock.is-open').getByRole('tab', { name: 'Schema' }).first().click();
    await page.locator('.opblock.is-open .json-schema-2020-12').first().waitFor();
    expect.soft(await axeViolations(page, 'moderate')).toEqual([]);
    // Not even the browser's own request for an icon fails.
    expect(errors).toEqual([]);
    await page.close();
  });

  // Soft assertions: each finding is reported on its own.
  it('API reference on a 320 px phone asking for less motion: an open operation fits, nothing animates (found from outside)', async () => {
    const docs = async (reducedMotion: 'reduce' | 'no-preference') => {
      const ctx = await browser.newContext({ viewport: { width: 320, height: 640 }, isMobile: true, hasTouch: true, reducedMotion });
      const { page, problems } = await openPage(ctx);
      await page.goto(`${stack.api}/docs`);
      await page.locator('.btn.authorize').waitFor();
      return { ctx, page, problems };
    };
    const { ctx, page, problems } = await docs('reduce');
    // Its responses table (example JSON in a column beside the status code) made the page 390 px wide.
    await page
      .locator('.opblock-summary-control', { hasText: /^GET\s*\/plans/ })
      .first()
      .click();
    await page.locator('.opblock.is-open .responses-table').waitFor();
    expect.soft(await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth])).toEqual([320, 320]);
    expect.soft(await axeViolations(page, 'moderate')).toEqual([]);
    await screenshots(page, 'api-reference-open', false);
    // Swagger UI's buttons and tag arrows animate (0.3 s, 0.4 s) unless less motion is asked for.
    const durations = (p: Page) =>
      p.evaluate(() => ['.btn.authorize', '.opblock-tag svg'].map((s) => getComputedStyle(document.querySelector(s)!).transitionDuration));
    expect.soft(await durations(page)).toEqual(['0s', '0s']);
    expect(problems).toEqual([]);
    await ctx.close();
    const moving = await docs('no-preference');
    expect(await durations(moving.page)).toEqual(['0.3s', '0.4s']);
    await moving.ctx.close();
  });

  it('API reference: a list of its sections takes the keyboard to each one in a few stops (found from outside: about 370 before the last)', async () => {
    const { page, problems } = await openPage(await browser.newContext({ viewport: DESKTOP }));
    await page.goto(`${stack.api}/docs`);
    await page.locator('.opblock').first().waitFor();
    const nav = page.getByRole('navigation', { name: 'Sections of the reference' });
    await nav.waitFor();
    const tags = await page.locator('h3.opblock-tag').evaluateAll((els) => els.map((e) => e.getAttribute('data-tag')));
    expect(tags.length).toBeGreaterThan(5);
    expect(await nav.getByRole('link').allTextContents()).toEqual([...tags, 'Webhooks', 'Schemas']);
    // From the top of the page, the last tag's link is within as many stops as there are sections.
    const last = tags.at(-1)!;
    await page.locator('body').focus();
    let presses = 0;
    while ((await page.evaluate(() => document.activeElement?.textContent)) !== last && presses < tags.length + 4) {
      await page.keyboard.press('Tab');
      presses++;
    }
    expect(await page.evaluate(() => document.activeElement?.tagName)).toBe('A');
    await page.keyboard.press('Enter');
    // The focus is on that section's heading, in sight, and Tab goes on inside the section.
    expect(await page.evaluate(() => (document.activeElement as HTMLElement).dataset.tag)).toBe(last);
    expect(await page.locator(`h3.opblock-tag[data-tag="${last}"]`).isVisible()).toBe(true);
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.closest('.opblock-tag-section')?.querySelector('h3')?.dataset.tag)).toBe(last);
    // The schemas too.
    await nav.getByRole('link', { name: 'Schemas' }).focus();
    await page.keyboard.press('Enter');
    expect(await page.evaluate(() => document.activeElement?.closest('section')?.classList.contains('models'))).toBe(true);
    expect.soft(await axeViolations(page, 'moderate')).toEqual([]);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('API reference: Authorize opens a modal dialog that keeps the focus, names its controls and gives the focus back (found from outside)', async () => {
    const { page, problems } = await openPage(await browser.newContext({ viewport: DESKTOP }));
    await page.goto(`${stack.api}/docs`);
    const authorize = page.locator('.scheme-container button.authorize');
    await authorize.waitFor();
    await authorize.focus();
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: 'Available authorizations' });
    await dialog.waitFor();
    expect(await dialog.getAttribute('aria-modal')).toBe('true');
    // The focus is on its first key field, and each field has its own id and one label naming it.
    const fields = dialog.locator('input[type=text]');
    expect(await fields.count()).toBe(3);
    expect(await page.evaluate(() => document.activeElement === document.querySelector('.modal-ux input[type=text]'))).toBe(true);
    const named = await fields.evaluateAll((els) => els.map((e) => [e.id, (e as HTMLInputElement).labels?.length ?? 0]));
    expect(new Set(named.map(([id]) => id)).size).toBe(3);
    expect(named.map(([, labels]) => labels)).toEqual([1, 1, 1]);
    // Each described by its scheme's heading (its label says only "Value:").
    const described = await fields.evaluateAll((els) => els.map((e) => document.getElementById(e.getAttribute('aria-describedby') ?? '')?.textContent ?? ''));
    expect(described.map((d) => d.split(/\s/)[0])).toEqual(['AdminKey', 'InvoiceKey', 'SubscriberToken']);
    // Every control in it has a name (its close button was a bare "button").
    const snapshot = await dialog.ariaSnapshot();
    expect(snapshot).toContain('button "Close"');
    expect(snapshot).not.toMatch(/- (button|textbox)\s*$/m);
    // Tab and Shift+Tab go round inside it, never to the page behind.
    const inside = () => page.evaluate(() => !!document.activeElement?.closest('.modal-ux'));
    for (let i = 0; i < 12; i++) {
      await page.keyboard.press('Tab');
      expect(await inside()).toBe(true);
    }
    for (let i = 0; i < 12; i++) {
      await page.keyboard.press('Shift+Tab');
      expect(await inside()).toBe(true);
    }
    // Escape closes it, and the focus is back on Authorize.
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });
    expect(await page.evaluate(() => document.activeElement?.classList.contains('authorize'))).toBe(true);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('API reference by keyboard: every focus stop is seen, with a 3 px ring of 3:1 contrast; its tabs are big enough (found from outside)', async () => {
    const { page, problems } = await openPage(await browser.newContext({ viewport: DESKTOP }));
    await page.goto(`${stack.api}/docs`);
    await page.locator('.opblock').first().waitFor();
    // An open operation: its Example Value / Schema tabs and its examples' copy buttons are focus stops too.
    await page
      .locator('.opblock-summary-control', { hasText: /^GET\s*\/plans/ })
      .first()
      .click();
    await page.locator('.opblock.is-open .responses-table').waitFor();
    await page.locator('.opblock.is-open .tab').first().waitFor();
    // Example Value / Schema: Swagger UI's are 14 px tall (found from outside), under the 24 px WCAG asks.
    const tabs = await page.locator('.opblock.is-open .tab button.tablinks').evaluateAll((els) =>
      els.map((e) => {
        const box = e.getBoundingClientRect();
        return `${e.textContent} ${Math.round(box.width)}x${Math.round(box.height)}`;
      }),
    );
    expect(tabs.length).toBeGreaterThan(0);
    expect.soft(tabs.filter((t) => Number(t.split('x').pop()) < 24 || Number(t.split(' ').pop()!.split('x')[0]) < 24)).toEqual([]);
    await page.locator('body').focus();
    const stops: string[] = [];
    const unseen = new Set<string>();
    const faint = new Set<string>();
    for (let i = 0; i < 600; i++) {
      await page.keyboard.press('Tab');
      const stop = await page.evaluate(() => {
        const el = document.activeElement as HTMLElement | null;
        if (!el || el === document.body) return null;
        // Each element once: the second time round is where the page's focus order starts again.
        const seen = ((window as unknown as { seenStops?: WeakSet<Element> }).seenStops ??= new WeakSet());
        if (seen.has(el)) return 'again';
        seen.add(el);
        const box = el.getBoundingClientRect();
        // Seen: a box of its own that is not clipped to nothing or covered where it is.
        const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
        const style = getComputedStyle(el);
        // What the ring is drawn on: the backgrounds of the boxes that hold it (not a box it lies outside of),
        // tints laid over the white page.
        const out = Number.parseFloat(style.outlineOffset) + Number.parseFloat(style.outlineWidth);
        const layers: number[][] = [];
        for (let n: HTMLElement | null = el.parentElement; n; n = n.parentElement) {
          const r = n.getBoundingClientRect();
          if (n !== document.body && (r.left > box.left - out || r.right < box.right + out || r.top > box.top - out || r.bottom < box.bottom + out)) continue;
          const c = getComputedStyle(n)
            .backgroundColor.match(/[\d.]+/g)!
            .map(Number);
          if ((c[3] ?? 1) > 0) layers.unshift(c);
        }
        let bg = [255, 255, 255];
        for (const [r, g, b, a = 1] of layers) bg = [r! * a + bg[0]! * (1 - a), g! * a + bg[1]! * (1 - a), b! * a + bg[2]! * (1 - a)];
        const name = `${el.tagName.toLowerCase()}.${el.className} "${(el.getAttribute('aria-label') ?? el.textContent ?? '').trim().slice(0, 40)}"`;
        return {
          name,
          width: box.width,
          height: box.height,
          visible: el.checkVisibility({ opacityProperty: true, visibilityProperty: true }) && !!hit && (hit === el || el.contains(hit)),
          ring: { style: style.outlineStyle, width: Number.parseFloat(style.outlineWidth), color: style.outlineColor },
          bg: `rgb(${bg.map(Math.round).join(', ')})`,
        };
      });
      if (stop === 'again') break;
      if (!stop) continue;
      stops.push(stop.name);
      if (!(stop.visible && stop.width >= 1 && stop.height >= 1)) unseen.add(`${stop.name} ${Math.round(stop.width)}x${Math.round(stop.height)}`);
      // A ring of our own: `auto` is the browser's, 1 px rgb(229, 151, 0) in chromium.
      if (stop.ring.style !== 'solid' || stop.ring.width < 3 || contrast(stop.ring.color, stop.bg) < 3) {
        faint.add(`${stop.name}: ${stop.ring.style} ${stop.ring.width}px ${stop.ring.color} on ${stop.bg}`);
      }
    }
    expect(stops.length).toBeGreaterThan(20);
    // Swagger UI's "Copy path to clipboard" buttons are 0 px wide until hovered: a focus nobody sees (found from outside).
    expect.soft([...unseen]).toEqual([]);
    // Its ring is the browser's 1 px rgb(229, 151, 0), 2.2:1 on white (found from outside).
    expect.soft([...faint]).toEqual([]);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('API reference at 200% zoom on a phone (180 and 240 px wide) does not scroll sideways (found from outside)', async () => {
    for (const width of [180, 240]) {
      const ctx = await browser.newContext({ viewport: { width, height: 370 } });
      const page = await ctx.newPage();
      await page.goto(`${stack.api}/docs`);
      await page.locator('.opblock').first().waitFor();
      await expect.poll(() => page.locator('button.opblock-control-arrow').count()).toBeGreaterThan(0);
      // The operations' chevrons stuck out past the screen (found from outside).
      const past = await page
        .locator('button.opblock-control-arrow')
        .evaluateAll((els) => els.filter((e) => e.getBoundingClientRect().right > window.innerWidth).length);
      expect.soft(past, `${width} px`).toBe(0);
      expect.soft(await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]), `${width} px`).toEqual([width, width]);
      // The screenshots helper would take it at phone and desktop width: this one at its own.
      await page.screenshot({ path: join(import.meta.dirname, '..', 'test-artifacts', 'pages', `api-reference-${width}px.png`) });
      await ctx.close();
    }
  });

  it('checkout by Lightning: plan, QR, copy and wallet link, paid live, then the portal shows the subscription and cancels it', async () => {
    const p = await plan({
      name: 'Gold',
      description: 'Members-only posts and the monthly call.',
      amount_sats: 21000,
      allow_onchain: true,
      allow_cardproc: true,
      allow_walletproc: true,
    });
    const { page, problems } = await openPage(phone);
    const res = await page.goto(p.checkout_url);
    expect(res!.status()).toBe(200);
    expect(res!.headers()['cache-control']).toBe('no-cache');
    await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Gold');
    expect(await page.locator('main').textContent()).toContain('Members-only posts and the monthly call.');
    expect(await page.locator('#price').textContent()).toBe('21,000 sats per month');
    // A fiat rail is on: the fiat price at FIAT_RATE_FIXED (100,000 per bitcoin).
    // Both fiat rails are named (found from outside: PayPal left out).
    expect(await page.locator('#fiat-price').textContent()).toBe("About $21.00 at today's rate when paid by card or online wallet (PayPal).");
    expect(await page.getByRole('radio').count()).toBe(4);
    // An e-mail address is asked for, and a wrong one is said in words before anything is sent.
    await page.getByLabel('E-mail').fill('not-an-address');
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    expect(await page.locator('#contact-email-error').textContent()).toContain('e-mail address');
    expect(await page.getByLabel('E-mail').getAttribute('aria-invalid')).toBe('true');
    // An address over the API's limit: its 422 in words (found from outside: the schema library's own words).
    await page.getByLabel('E-mail').fill(`${'a'.repeat(300)}@example.com`);
    const refused = page.waitForResponse((r) => r.url().endsWith('/public/subscribe'));
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    expect((await refused).status()).toBe(422);
    await expect.poll(() => page.locator('#contact-email-error').textContent()).toBe('This is too long: 254 characters at most.');
    await check(page, problems, 'checkout');
    // Every choice is a finger's width tall, its label the target (found from outside: 20 px radios).
    const heights = await page.locator('.choice label').evaluateAll((els) => els.map((e) => e.getBoundingClientRect().height));
    // Four methods; no reminder checkbox (no channel is set up for this seller: nothing would be sent).
    expect(heights.length).toBe(4);
    for (const hgt of heights) expect(hgt).toBeGreaterThanOrEqual(44);

    // "Skip to content" moves the focus and keeps what was typed (found from outside: the fragment's
    // popstate drew the form anew, empty, as a Back would).
    const skip = async () => {
      await page.locator('a.skip').focus();
      await page.keyboard.press('Enter');
      expect(await page.evaluate(() => document.activeElement?.id)).toBe('main');
      expect(new URL(page.url()).hash).toBe('');
    };
    await page.getByLabel('E-mail').fill('skipping@example.com');
    await skip();
    expect(await page.getByLabel('E-mail').inputValue()).toBe('skipping@example.com');

    const c = await checkout(page, 'Lightning', 'lightning@example.com');
    await page.locator('#pay').waitFor();
    expect(await page.getByRole('img', { name: 'QR code of the Lightning invoice' }).count()).toBe(1);
    expect(await page.getByRole('textbox', { name: 'Invoice' }).inputValue()).toBe(c.payment_request);
    expect(await page.getByRole('link', { name: 'Open in a Lightning wallet' }).getAttribute('href')).toBe(`lightning:${c.payment_request}`);
    await page.getByRole('button', { name: 'Copy invoice' }).click();
    await expect.poll(() => page.locator('#announcer').textContent()).toBe('Invoice copied');
    await check(page, problems, 'checkout-lightning');

    await pay(c.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await page.locator('#done-message').textContent()).toBe('Payment received: your subscription to Gold is active.');
    const link = page.getByRole('link', { name: 'Manage your subscription' });
    expect(await link.getAttribute('href')).toBe(c.manage_url);
    await check(page, problems, 'checkout-paid');
    // The one-time portal link stays through the skip link (found from outside: it was forgotten).
    await skip();
    expect(await link.getAttribute('href')).toBe(c.manage_url);

    // The portal link.
    const portalRes = page.waitForResponse((r) => r.url().includes('/public/manage/subscriptions'));
    await link.click();
    expect((await portalRes).status()).toBe(200);
    await page.getByRole('heading', { name: 'Your subscriptions' }).waitFor();
    const card = page.locator(`#sub-${c.subscription_id}`);
    expect(await card.getByRole('heading', { name: 'Gold' }).count()).toBe(1);
    expect(await card.locator('.status-active').textContent()).toBe('Active');
    // This seller has no channel: no switches for messages nobody would send (found from outside).
    await expect
      .poll(() => card.getByText('You get no messages about this subscription: the seller sends none by the contact details you gave.').count())
      .toBe(1);
    expect(await card.getByRole('checkbox').count()).toBe(0);
    expect(await card.textContent()).toMatch(/Access.*Yes, until at least/);
    // Payment history with a receipt.
    const receipt = page.locator('details.receipt').first();
    expect((await receipt.locator('summary').boundingBox())!.height).toBeGreaterThanOrEqual(44);
    expect(await page.locator('.payment-row .pill-paid').count()).toBe(1);
    await receipt.locator('summary').click();
    expect(await receipt.textContent()).toContain(c.payment_id);
    expect(await receipt.textContent()).toContain('21,000 sats');
    // It names the period it paid for (found from outside: it did not), as the API has it.
    const gold = (await admin.get(`/subscriptions/${c.subscription_id}`)).body;
    expect((await admin.get(`/payments/${c.payment_id}`)).body).toMatchObject({ period_start: gold.current_period_start, period_end: gold.current_period_end });
    expect(await receipt.locator('dt:text-is("Period") + dd').textContent()).toBe(
      `${pageDate(gold.current_period_start)} to ${pageDate(gold.current_period_end)}`,
    );
    await check(page, problems, 'portal');

    // Cancel, with a confirmation that says what access remains; keeping it first changes nothing. The
    // button names its plan: every card has one.
    expect(await card.getByRole('button', { name: 'Cancel subscription to Gold', exact: true }).count()).toBe(1);
    await card.getByRole('button', { name: 'Cancel subscription' }).click();
    const dialog = page.getByRole('dialog');
    expect(await dialog.textContent()).toMatch(/You keep access until .+\. After that you will not be charged again\./);
    await dialog.getByRole('button', { name: 'Keep subscription' }).click();
    expect((await admin.get(`/subscriptions/${c.subscription_id}`)).body.status).toBe('active');
    await card.getByRole('button', { name: 'Cancel subscription' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
    // Said once, with the date as a person reads it (the API's message has it in ISO form), and focused.
    await expect.poll(() => page.locator('#notice').textContent()).toMatch(/^Gold is cancelled\. Access continues until \d{1,2} [A-Z][a-z]+ \d{4}\.$/);
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('notice');
    await page.waitForTimeout(300);
    const said = await page
      .locator('[aria-live], [role=status], [role=alert]')
      .evaluateAll((els) => els.map((e) => e.textContent ?? '').filter((t) => /cancelled/i.test(t)));
    expect(said.join(' ')).not.toMatch(/\d{4}-\d\d-\d\dT/);
    expect(said.length).toBeLessThanOrEqual(1);
    expect(await page.locator(`#sub-${c.subscription_id} .status-cancelled`).textContent()).toBe('Cancelled');
    expect(await page.locator(`#sub-${c.subscription_id}`).getByRole('button', { name: 'Cancel subscription' }).count()).toBe(0);
    expect((await admin.get(`/subscriptions/${c.subscription_id}`)).body).toMatchObject({ status: 'cancelled', has_access: true });
    expect(problems).toEqual([]);
    await page.close();
  });

  it('checkout by on-chain, card and wallet processor: what pays each, paid live, success', async () => {
    const p = await plan({ name: 'Every rail', amount_sats: 50000, allow_lightning: false, allow_onchain: true, allow_cardproc: true, allow_walletproc: true });
    for (const [label, email] of [
      ['On-chain bitcoin', 'chain@example.com'],
      ['Card', 'card@example.com'],
      ['Online wallet (PayPal)', 'paypal@example.com'],
    ] as const) {
      const { page, problems } = await openPage(phone);
      await page.goto(p.checkout_url);
      const c = await checkout(page, label, email);
      await page.locator('#pay').waitFor();
      if (label === 'On-chain bitcoin') {
        expect(await page.getByRole('textbox', { name: 'Address' }).inputValue()).toBe(c.onchain_address);
        expect(await page.getByRole('img', { name: 'QR code of the bitcoin payment request' }).count()).toBe(1);
        expect(await page.getByRole('link', { name: 'Open in a bitcoin wallet' }).getAttribute('href')).toMatch(
          new RegExp(`^bitcoin:${c.onchain_address}\\?amount=0\\.00050000`),
        );
        await check(page, problems, 'checkout-onchain');
      } else {
        const a = page.getByRole('link', { name: label === 'Card' ? /Pay by card/ : /Pay with your online wallet/ });
        expect(await a.getAttribute('href')).toBe(c.checkout_url);
        // Priced in fiat at FIAT_RATE_FIXED (100,000 per bitcoin): 50,000 sats are $50.00.
        expect(await page.locator('#pay').textContent()).toContain('Pay $50.00 (50,000 sats)');
        if (label === 'Card') await check(page, problems, 'checkout-card');
        expect(await a.getAttribute('rel')).toContain('noopener');
      }
      await pay(c.payment_id);
      await page.locator('#done').waitFor({ timeout: 20_000 });
      expect(await page.locator('#done-message').textContent()).toBe('Payment received: your subscription to Every rail is active.');
      expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(c.manage_url);
      expect(problems).toEqual([]);
      await page.close();
    }
  });

  it("card and wallet processor: the processor's page (dev), then back on the checkout page that follows the payment", async () => {
    const p = await plan({ name: 'Processor return', amount_sats: 20000, allow_lightning: false, allow_cardproc: true, allow_walletproc: true });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const c = await checkout(page, 'Card', 'return@example.com');
    // The link opens the processor's page in a new tab; the dev provider's stands in for Stripe's.
    const [proc] = await Promise.all([page.context().waitForEvent('page'), page.getByRole('link', { name: /Pay by card/ }).click()]);
    const procProblems: string[] = [];
    proc.on('pageerror', (e) => procProblems.push(`page error: ${e.message}`));
    await proc.waitForLoadState();
    expect(proc.url()).toBe(`${p.checkout_url}?payment=${c.payment_id}&processor=dev`);
    await proc.getByRole('button', { name: 'Pay (test payment)' }).waitFor();
    await check(proc, procProblems, 'processor-dev');
    await proc.getByRole('button', { name: 'Pay (test payment)' }).click();
    // Back where the processor returns the payer: the payment's page, paid.
    await proc.locator('#done').waitFor({ timeout: 20_000 });
    expect(new URL(proc.url()).search).toBe(`?payment=${c.payment_id}`);
    expect(await proc.locator('#done-message').textContent()).toBe('Payment received: your subscription to Processor return is active.');
    // The processor's tab is another tab: the link is where the payment started (kept per tab only).
    expect(await proc.getByRole('link', { name: 'Manage your subscription' }).count()).toBe(0);
    expect(await proc.locator('#done').textContent()).toContain('The link to manage your subscription is on the page where you started');
    await check(proc, procProblems, 'processor-return-paid');
    // The tab that opened it saw the payment too, and keeps the portal link.
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(c.manage_url);
    expect((await admin.get(`/subscriptions/${c.subscription_id}`)).body.status).toBe('active');
    await proc.close();

    // Left the wallet processor without paying, in the tab that started the payment: the payment again,
    // with its pay link (found from outside: "Not paid yet… go back to the page you came from").
    const { page: back, problems: backProblems } = await openPage(phone);
    await back.goto(p.checkout_url);
    const w = await checkout(back, 'Online wallet (PayPal)', 'left@example.com');
    const procUrl = await back.getByRole('link', { name: /Pay with your online wallet/ }).getAttribute('href');
    await back.goto(procUrl!);
    await back.getByRole('button', { name: 'Cancel' }).click();
    await back.getByRole('heading', { name: 'Pay 20,000 sats for Processor return' }).waitFor();
    expect(await back.getByRole('link', { name: /Pay with your online wallet/ }).getAttribute('href')).toBe(procUrl);
    expect(new URL(back.url()).search).toBe(`?payment=${w.payment_id}`);
    // In a tab that never showed it: the page says it is not paid and offers a fresh start.
    await back.goto(procUrl!);
    await back.evaluate(() => sessionStorage.clear());
    await back.reload();
    await back.getByRole('button', { name: 'Cancel' }).click();
    await back.getByText(/^Not paid yet\. If you have paid/).waitFor();
    expect(await back.locator('#payment-status').getAttribute('role')).toBe('status');
    await check(back, backProblems, 'processor-return-unpaid');
    expect((await admin.get(`/subscriptions/${w.subscription_id}`)).body.status).toBe('pending');
    // Paid elsewhere after all (a processor's confirmation can come later): the page follows it.
    await pay(w.payment_id);
    await back.locator('#done').waitFor({ timeout: 20_000 });
    // The processor's page left open while the payment is made elsewhere (the checkout's own tab): it
    // follows too, and offers no payment any more (found from outside: "Pay (test payment)" for good).
    await back.goto(p.checkout_url);
    const open = await checkout(back, 'Card', 'open-processor@example.com');
    const stale = await openPage(phone);
    await stale.page.goto(`${p.checkout_url}?payment=${open.payment_id}&processor=dev`);
    await stale.page.getByRole('button', { name: 'Pay (test payment)' }).waitFor();
    await pay(open.payment_id);
    await stale.page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await stale.page.getByRole('button', { name: 'Pay (test payment)' }).count()).toBe(0);
    expect(await stale.page.evaluate(() => document.activeElement?.id)).toBe('done-heading');
    expect(stale.problems).toEqual([]);
    await stale.page.close();
    // A payment id that is not ours: a clear sentence, nothing else.
    await back.goto(`${p.checkout_url}?payment=pay_doesnotexist`);
    await back.getByText('This payment is not known here.', { exact: false }).waitFor();
    // The tab says it too (found from outside: "Pay for" on every payment view).
    expect(await back.title()).toMatch(/^Payment not found: /);
    expect(await back.getByRole('link', { name: 'Start again' }).getAttribute('href')).toBe(new URL(p.checkout_url).pathname);
    expect(problems).toEqual([]);
    await page.close();
    await back.close();
  });

  it('a trial plan starts without payment, by keyboard alone', async () => {
    const p = await plan({ name: 'Trial club', amount_sats: 3000, trial_days: 14 });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByText('14-day free trial: nothing to pay today.').waitFor();
    // No fiat rail on this plan: sats only.
    expect(await page.locator('#fiat-price').count()).toBe(0);
    const focused = () => page.evaluate(() => document.activeElement?.id || document.activeElement?.textContent?.trim());
    await page.keyboard.press('Tab');
    expect(await focused()).toBe('Skip to content');
    await page.keyboard.press('Tab');
    expect(await focused()).toBe('method-lightning');
    await page.keyboard.press('Tab');
    expect(await focused()).toBe('contact-email');
    await page.keyboard.type('trial@example.com');
    await page.keyboard.press('Enter');
    await page.locator('#done').waitFor();
    expect(await page.locator('#done-message').textContent()).toMatch(
      // Its end as every date on the pages reads (found from outside: the API's ISO form), and what follows.
      /^Your free trial of Trial club has started\. It ends on \d{1,2} [A-Z][a-z]+ \d{4}; after it, 3,000 sats per month\.$/,
    );
    // The result takes the focus, so a screen reader reads it; the portal link is next.
    expect(await focused()).toBe('done-heading');
    // A reload shows the result again, with its link (found from outside: an empty form).
    const link = await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href');
    await page.reload();
    await page.locator('#done').waitFor();
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(link);
    // The same address in another tab, which holds no result: said so above the form, not a bare form (found in review).
    const other = await openPage(phone);
    await other.page.goto(page.url());
    await other.page.locator('#checkout-form').waitFor();
    expect(await other.page.locator('#form-note').textContent()).toBe(
      "This address showed a subscription's confirmation, which is kept only for a while in the tab where it was made. The link to manage it was shown there; the seller can send it to you again. The form below starts a new subscription.",
    );
    expect(new URL(other.page.url()).search).toBe('');
    expect(await other.page.getByRole('link', { name: 'Manage your subscription' }).count()).toBe(0);
    await check(other.page, other.problems, 'checkout-subscribed-elsewhere');
    // The same contact there: a trial has no unpaid checkout to tell of (found from outside: "pay it where it was started").
    await other.page.getByLabel('E-mail').fill('trial@example.com');
    await other.page.getByRole('button', { name: 'Start free trial' }).click();
    await expect
      .poll(() => other.page.locator('#form-error').textContent())
      .toBe(
        'This contact already has a subscription to this plan: its link to manage it (and to pay a renewal that is due) was shown when it started; the seller can send it to you again.',
      );
    await other.page.close();
    await page.locator('#done-heading').focus();
    await page.keyboard.press('Tab');
    expect(await focused()).toBe('portal-link');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Trial club' }).waitFor();
    expect(await page.locator('main').textContent()).toContain('Free trial until');
    // Nothing is paid yet: the method pays after the trial.
    expect(await page.locator('main').textContent()).toContain('Payment methodTrial, then Lightning');
    expect(problems).toEqual([]);
    await page.close();
  });

  /** A Lightning checkout on the page whose invoice then expired (the dev clock an hour on): its fresh-invoice button shown. */
  async function expiredLightningCheckout(name: string, amount_sats: number, email: string) {
    const p = await plan({ name, amount_sats });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const c = await checkout(page, 'Lightning', email);
    await page.locator('#pay').waitFor();
    // The focus on the invoice's Copy button when it runs out: on the heading then, not the page's body (found from outside).
    await page.getByRole('button', { name: 'Copy invoice' }).focus();
    // What the heading says as it takes the focus is what a screen reader reads (review finding: the old words).
    await page.evaluate(() =>
      document.addEventListener('focusin', (e) => document.body.setAttribute('data-focused-with', (e.target as HTMLElement).textContent ?? ''), true),
    );
    expect((await admin.post('/dev/clock', { advance_seconds: 3700 })).status).toBe(200);
    await page.getByRole('button', { name: 'Get a fresh invoice' }).waitFor({ timeout: 20_000 });
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Payment request expired');
    expect(await page.evaluate(() => document.body.getAttribute('data-focused-with'))).toBe('Payment request expired');
    expect(await page.title()).toMatch(/^Payment request expired: /);
    return { p, page, problems, c };
  }

  /** A monthly subscription paid by Lightning, 28 days on: its renewal payment is open (issued 3 days before the period ends). */
  async function renewalDue(body: Record<string, unknown>, email: string) {
    const p = await plan(body);
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email })).body;
    await pay(sub.payment_id);
    await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    expect((await admin.post('/dev/clock', { advance_seconds: 28 * 86400 })).status).toBe(200);
    const renewal = await until(
      () => admin.get(`/payments?subscription_id=${sub.subscription_id}&status=pending`),
      (r) => r.body.items?.length === 1,
    );
    return { p, sub, due: renewal.body.items[0] };
  }

  it('the portal shows the open renewal payment, payable right there', async () => {
    const { sub, due } = await renewalDue({ name: 'Renew', amount_sats: 2000, grace_period_days: 3 }, 'renew@example.com');
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await card.getByRole('heading', { name: 'Payment due' }).waitFor();
    expect(await card.getByRole('textbox', { name: 'Invoice' }).inputValue()).toBe(due.payment_request);
    expect(await card.getByRole('img', { name: 'QR code of the Lightning invoice' }).count()).toBe(1);
    expect(await page.locator('.payment-row .pill-pending').count()).toBe(1);
    // The invoice lives a day; the renewal is due at the period's end (found from outside: "Payable until" a
    // day before "Renews on", as if the renewal ended there).
    const { current_period_end: renewsOn } = (await admin.get(`/subscriptions/${sub.subscription_id}`)).body;
    expect(await card.locator('.open-payment .hint').last().textContent()).toBe(
      `Pay by ${pageTime(renewsOn)} to renew on time; a new invoice replaces this one if it expires first.`,
    );
    await check(page, problems, 'portal-renewal-due');
    // Past its period end, in grace: access lasts until the grace ends, and the card says so.
    const { current_period_end: end } = (await admin.get(`/subscriptions/${sub.subscription_id}`)).body;
    const { now } = (await admin.post('/dev/clock', {})).body;
    expect((await admin.post('/dev/clock', { advance_seconds: end - now + 3600 })).status).toBe(200);
    await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'past_due',
    );
    await page.reload();
    await card.locator('.status-past_due').waitFor();
    const graceEnd = new Intl.DateTimeFormat('en-GB', { dateStyle: 'long', timeZone: 'UTC' }).format(new Date((end + 3 * 86400) * 1000));
    const access = await card.locator('dt:text-is("Access") + dd').textContent();
    expect(access).toMatch(new RegExp(`^Yes, until ${graceEnd}.* UTC: pay before then to keep access without a break$`));
    expect(await card.textContent()).toContain('Period ended');
    // The invoice of the day (the first may have been replaced when it expired).
    const open = await until(
      () => admin.get(`/payments?subscription_id=${sub.subscription_id}&status=pending`),
      (r) => r.body.items?.length === 1,
    );
    await pay(open.body.items[0].id);
    await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'active' && r.body.payments?.filter((x: { status: string }) => x.status === 'paid').length === 2,
    );
    await page.reload();
    await page.getByRole('heading', { name: 'Payments and receipts' }).waitFor();
    expect(await page.locator('.payment-row .pill-paid').count()).toBe(2);
    expect(await card.getByRole('heading', { name: 'Payment due' }).count()).toBe(0);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a payment that bought nothing is not shown as a plain "Paid": not applied, why, and that the seller refunds it (found from outside)', async () => {
    const p = await plan({ name: 'Paid for nothing', amount_sats: 1200 });
    const c = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'paid-for-nothing@example.com' })).body;
    // Cancelled at once before its payment arrived; the payer pays the withdrawn invoice all the same.
    expect((await admin.post(`/subscriptions/${c.subscription_id}/cancel`, { immediate: true })).status).toBe(200);
    await pay(c.payment_id);
    const paid = await until(
      () => admin.get(`/payments/${c.payment_id}`),
      (r) => r.body.status === 'paid' && typeof r.body.unapplied_reason === 'string',
    );
    const { page, problems } = await openPage(phone);
    await page.goto(c.manage_url);
    await page.getByRole('heading', { name: 'Payments and receipts' }).waitFor();
    const row = page.locator('.payment-row').filter({ hasText: 'Paid for nothing' });
    await row.waitFor();
    expect(await row.locator('.pill').textContent()).toBe('Paid, not applied');
    expect(await row.textContent()).toContain(
      `This payment was not applied. ${paid.body.unapplied_reason.replace(/[\s.]+$/, '')}. The seller is told to refund it; please contact them.`,
    );
    await row.locator('details.receipt summary').click();
    expect(await row.locator('dt:text-is("Applied") + dd').textContent()).toBe('No: to be refunded by the seller');
    await check(page, problems, 'portal-payment-unapplied');
    await page.close();
  });

  it('a renewal paid by way of the processor\'s return says it renewed, not "You are subscribed" (found from outside)', async () => {
    const { p, due } = await renewalDue({ name: 'Renewed here', amount_sats: 2100 }, 'renewed-here@example.com');
    const { page, problems } = await openPage(phone);
    await page.goto(`${p.checkout_url}?payment=${encodeURIComponent(due.id)}`);
    await expect.poll(() => page.locator('#payment-status').textContent()).toContain('Not paid yet.');
    await pay(due.id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await page.getByRole('heading', { level: 2 }).textContent()).toBe('Renewal paid');
    expect(await page.locator('#done-message').textContent()).toBe('Payment received: your subscription to Renewed here is renewed.');
    // No confirmation message promised (they may be off), no "Subscribe to" above it (found from outside).
    expect(await page.locator('#link-elsewhere').textContent()).toBe('The page of your subscription, where you paid from, shows it renewed.');
    expect(await page.locator('header.plan .eyebrow').textContent()).toBe('Renewal of');
    expect(await page.title()).toMatch(/^Paid for Renewed here/);
    expect((await anon.get(`/public/payment/${due.id}/status`)).body).toMatchObject({ status: 'paid', applied: true, purpose: 'renewal' });
    expect(problems).toEqual([]);
    await page.close();
  });

  it("the portal offers no notice switches to a subscriber the seller's channels do not reach (found from outside)", async () => {
    const p = await plan({ name: 'Chat only notices', amount_sats: 1100 });
    const put = await admin.put(`/plans/${p.id}/notification-settings`, { inherit: false, channels: { messenger: { bot_token: BOT_TOKEN } } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'mail-only@example.com' })).body;
    await pay(sub.payment_id);
    await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await card.getByRole('heading', { name: 'Chat only notices' }).waitFor();
    await expect
      .poll(() => card.getByText('You get no messages about this subscription: the seller sends none by the contact details you gave.').count())
      .toBe(1);
    expect(await card.getByRole('checkbox').count()).toBe(0);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('the portal offers a switch only for a kind of notice the seller sends (found from outside: "Confirmations" for a plan sending none)', async () => {
    const p = await plan({ name: 'Reminders only', amount_sats: 1200 });
    const put = await admin.put(`/plans/${p.id}/notification-settings`, {
      inherit: false,
      channels: { email: { smtp_url: mailbox.url } },
      subscriber_events: ['renewal.reminder', 'subscription.past_due'],
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'reminders-only@example.com' })).body;
    const token = new URL(sub.manage_url).searchParams.get('token')!;
    const listed = await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': token } });
    expect(listed.body.items[0]).toMatchObject({ id: sub.subscription_id, notice_kinds: ['reminders'] });
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await card.getByRole('checkbox', { name: /Payment reminders/ }).waitFor();
    expect(await card.getByRole('checkbox').count()).toBe(1);
    // None of either kind: no switch, and a word why.
    const none = await admin.put(`/plans/${p.id}/notification-settings`, {
      inherit: false,
      channels: { email: { smtp_url: mailbox.url } },
      subscriber_events: [],
    });
    expect(none.status, JSON.stringify(none.body)).toBe(200);
    await page.reload();
    await card.getByText('The seller sends no reminders or confirmations for this subscription; cancellation and expiry notices are always sent.').waitFor();
    expect(await card.getByRole('checkbox').count()).toBe(0);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a subscription that ended before any payment shows no period (found from outside: "Current period ends" a past date)', async () => {
    const p = await plan({ name: 'Never paid', amount_sats: 1000 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'never-paid@example.com' })).body;
    expect((await admin.post(`/subscriptions/${sub.subscription_id}/cancel`, {})).status).toBe(200);
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await card.locator('.status-cancelled').waitFor();
    expect(await card.textContent()).not.toMatch(/Current period ends|Renews on|Period ended/);
    // Nothing was ever paid: the method it was to be paid by, not "Paid by" (found from outside).
    expect(await card.locator('dt:text-is("Payment method") + dd').textContent()).toBe('Lightning');
    expect(await card.locator('dt:text-is("Paid by")').count()).toBe(0);
    // The same while its first payment is awaited.
    const waiting = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'never-paid-2@example.com' })).body;
    await page.goto(waiting.manage_url);
    const pending = page.locator(`#sub-${waiting.subscription_id}`);
    await pending.locator('.status-pending').waitFor();
    expect(await pending.locator('dt:text-is("Payment method") + dd').textContent()).toBe('Lightning');
    expect(await pending.locator('dt:text-is("Paid by")').count()).toBe(0);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('an ended subscription paid once shows its period when its payment is older than the newest 50 (review finding)', async () => {
    const email = 'many-payments@example.com';
    const p = await plan({ name: 'Paid long ago', amount_sats: 1000 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email })).body;
    await pay(sub.payment_id);
    await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    expect((await admin.post(`/subscriptions/${sub.subscription_id}/cancel`, { immediate: true })).status).toBe(200);
    // Fifty newer payments of the same subscriber: checkouts of other plans, left open.
    for (let i = 0; i < 50; i++) {
      const other = await plan({ name: `Newer ${i}`, amount_sats: 1000 });
      expect((await anon.post('/public/subscribe', { plan_id: other.id, payment_method: 'lightning', email })).status).toBe(201);
    }
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await card.locator('.status-cancelled').waitFor();
    expect(await card.textContent()).toContain('Period ended');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a notice switch refused with 401 (the link revoked meanwhile) shows the bad-link view, as on load (review finding)', async () => {
    const p = await planWithMessages({ name: 'Revoked', amount_sats: 1000, trial_days: 7 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'revoked@example.com' })).body;
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const reminders = page.locator(`#sub-${sub.subscription_id}`).getByRole('checkbox', { name: /^Payment reminders/ });
    await reminders.waitFor();
    await stack.db.query(`UPDATE billing.subscribers SET token_hash = 'revoked' WHERE id = (SELECT subscriber_id FROM billing.subscriptions WHERE id = $1)`, [
      sub.subscription_id,
    ]);
    await reminders.focus();
    await page.keyboard.press('Space');
    await page.getByRole('heading', { name: 'This link does not work' }).waitFor();
    expect(await page.title()).toBe('This link does not work');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('main');
    expect((await admin.get(`/subscriptions/${sub.subscription_id}`)).body.receive_reminders).toBe(true);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('every portal call refused with 401 (the link replaced meanwhile) shows the bad-link view, not an inline error (review finding)', async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    const email = 'replaced@example.com';
    const auto = await plan({ name: 'Replaced auto', amount_sats: 1000, allow_nwc: true });
    const manual = await plan({ name: 'Replaced manual', amount_sats: 1000 });
    const first = await anon.post('/public/subscribe/nwc', { plan_id: auto.id, email, nwc_connection_string: wallet.connectionString() });
    expect(first.status).toBe(201);
    const unpaid = (await anon.post('/public/subscribe', { plan_id: manual.id, payment_method: 'lightning', email })).body;
    const { rows } = await stack.db.query(
      'SELECT s.id, s.token_hash FROM billing.subscribers s JOIN billing.subscriptions b ON b.subscriber_id = s.id WHERE b.id = $1',
      [first.body.subscription_id],
    );
    const replace = (hash: string) => stack.db.query('UPDATE billing.subscribers SET token_hash = $2 WHERE id = $1', [rows[0].id, hash]);
    /** Opens the portal with its link good, replaces the link, then does `act`: the page says the link does not work. */
    const refusedOn = async (act: (page: Page) => Promise<void>, before?: (page: Page) => Promise<void>) => {
      await replace(rows[0].token_hash);
      const { page, problems } = await openPage(phone);
      await before?.(page);
      await page.goto(first.body.manage_url);
      await page.locator('ul.wallets').waitFor();
      await replace('replaced');
      await act(page);
      await page.getByRole('heading', { name: 'This link does not work' }).waitFor({ timeout: 20_000 });
      expect(await page.title()).toBe('This link does not work');
      expect(await page.evaluate(() => document.activeElement?.id)).toBe('main');
      expect(problems.filter((m) => !/net::ERR_FAILED/.test(m))).toEqual([]);
      await page.close();
    };
    const unpaidCard = (page: Page) => page.locator(`#sub-${unpaid.subscription_id}`);
    // Cancel.
    await refusedOn(async (page) => {
      await unpaidCard(page).getByRole('button', { name: 'Cancel subscription to Replaced manual', exact: true }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
    });
    expect((await admin.get(`/subscriptions/${unpaid.subscription_id}`)).body.status).toBe('pending');
    // Disconnect a wallet.
    await refusedOn(async (page) => {
      await page
        .locator('ul.wallets > li')
        .first()
        .getByRole('button', { name: /^Disconnect/ })
        .click();
      await page.getByRole('dialog').getByRole('button', { name: 'Disconnect wallet' }).click();
    });
    // Connect a wallet (checked by the service first, which needs no link).
    await refusedOn(async (page) => {
      const form = page.locator('#connect-form');
      await form.getByLabel('Wallet connection string').fill(wallet.connectionString());
      await form.getByRole('button', { name: 'Connect wallet' }).click();
    });
    expect((await stack.db.query('SELECT count(*)::int AS n FROM nwc.connections WHERE subscription_id = $1', [first.body.subscription_id])).rows).toEqual([
      { n: 1 },
    ]);
    // The payments, late: answered after the link was replaced.
    let release = () => {};
    const held = new Promise<void>((r) => (release = r));
    await refusedOn(
      async () => release(),
      (page) =>
        page.route('**/public/manage/payments?*', async (r) => {
          await held;
          await r.continue();
        }),
    );
    // "Try again" of payments that failed.
    await refusedOn(
      async (page) => {
        await page.unroute('**/public/manage/payments?*');
        await page.getByRole('button', { name: 'Try again' }).click();
      },
      (page) => page.route('**/public/manage/payments?*', (r) => r.abort()),
    );
    // The open payment paid meanwhile: the card is redrawn from the subscriptions the link no longer gets.
    await refusedOn(async (page) => {
      await unpaidCard(page).getByRole('heading', { name: 'Payment due' }).waitFor();
      await pay(unpaid.payment_id);
    });
  });

  it('payments that fail or time out after the page showed: "Try again" by keyboard asks for them alone; the card keeps its messages and the focus (review finding)', async () => {
    const p = await planWithMessages({ name: 'Retry', amount_sats: 1100 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'retry@example.com' })).body;
    const { page, problems } = await openPage(phone);
    // Longer than the page waits for them with the subscriptions: the late path.
    await page.route('**/public/manage/payments?*', async (r) => {
      await new Promise((done) => setTimeout(done, 3000));
      await r.abort();
    });
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    const reminders = card.getByRole('checkbox', { name: /^Payment reminders/ });
    const status = card.locator(`#notices-${sub.subscription_id}-status`);
    await reminders.focus();
    await page.keyboard.press('Space');
    await expect.poll(() => status.textContent()).toBe('Reminders for Retry are off.');
    await expect.poll(() => page.locator('#payments-error').textContent(), { timeout: 10_000 }).toMatch(/^Payments could not be loaded right now\./);
    await page.unroute('**/public/manage/payments?*');
    // By keyboard alone: from the switch, past the other switch and the cancel, to the retry.
    for (let i = 0; i < 3; i++) await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.closest('#payments') && document.activeElement.textContent)).toBe('Try again');
    await page.keyboard.press('Enter');
    await expect.poll(() => page.locator('#payments .payment-row').count(), { timeout: 10_000 }).toBe(1);
    expect(await page.locator('#announcer').textContent()).toBe('Loading your payments…');
    // The payments came alone: the page was not drawn anew, the focus is on what came.
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('payments-heading');
    await card.getByRole('heading', { name: 'Payment due' }).waitFor();
    expect(await status.textContent()).toBe('Reminders for Retry are off.');
    expect(await reminders.isChecked()).toBe(false);
    await check(
      page,
      problems.filter((m) => !/net::ERR_FAILED/.test(m)),
      'portal-payments-retried',
    );
    await page.close();
  });

  it('a card keeps what it said when the payments arrive late and when its payment is made (review finding)', async () => {
    const p = await planWithMessages({ name: 'Said', amount_sats: 1200 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'card-said@example.com' })).body;
    const { page, problems } = await openPage(phone);
    let release = () => {};
    const held = new Promise<void>((r) => (release = r));
    await page.route('**/public/manage/payments?*', async (r) => {
      await held;
      await r.continue();
    });
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    const confirmations = card.getByRole('checkbox', { name: /^Confirmations and receipts/ });
    const notices = card.locator(`#notices-${sub.subscription_id}-status`);
    const said = card.locator('p.status');
    await expect.poll(() => page.locator('#payments').textContent()).toContain('Loading your payments…');
    // A cancel that fails says so on the card; a switch saved says so too.
    await page.route('**/public/manage/subscription/*/cancel', (r) => r.abort());
    await card.getByRole('button', { name: 'Cancel subscription to Said', exact: true }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
    await expect.poll(() => said.textContent()).toContain('Could not reach the server');
    await page.unroute('**/public/manage/subscription/*/cancel');
    await confirmations.focus();
    await page.keyboard.press('Space');
    await expect.poll(() => notices.textContent()).toBe('Confirmations for Said are off.');
    // The payments arrive: the open one is added to the card, which still says both, the focus where it was.
    release();
    await card.getByRole('heading', { name: 'Payment due' }).waitFor();
    expect(await notices.textContent()).toBe('Confirmations for Said are off.');
    expect(await said.textContent()).toContain('Could not reach the server');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe(`notices-${sub.subscription_id}-receive_confirmations`);
    // Paid elsewhere: the card is drawn anew with its new status, and what it said stays.
    await pay(sub.payment_id);
    await expect.poll(() => card.locator('.status-active').textContent(), { timeout: 20_000 }).toBe('Active');
    expect(await notices.textContent()).toBe('Confirmations for Said are off.');
    expect(await confirmations.isChecked()).toBe(false);
    expect(problems.filter((m) => !/net::ERR_FAILED/.test(m))).toEqual([]);
    await page.close();
  });

  it('the portal without its wallets: the rest works, an open payment paid elsewhere shows live, cancel by keyboard', async () => {
    const p = await plan({ name: 'Live', amount_sats: 1234 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'live@example.com' })).body;
    const { page, problems } = await openPage(phone);
    // The NWC service does not answer: only the wallets section says so.
    await page.route('**/public/manage/wallets?*', (r) => r.abort());
    // A link pasted with a space after it works.
    await page.goto(`${sub.manage_url}%20`);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await card.getByRole('heading', { name: 'Payment due' }).waitFor();
    expect(await card.locator('.status-pending').textContent()).toBe('Waiting for the first payment');
    // A period that has not started has no end to show.
    expect(await card.textContent()).not.toMatch(/Current period ends|Renews on/);
    await expect.poll(() => page.locator('#wallets-error').textContent()).toMatch(/^Your wallets could not be loaded\./);
    expect(await page.getByRole('heading', { name: 'Payments and receipts' }).count()).toBe(1);

    // Hidden and shown again while a round of status questions is under way: no second round beside it.
    let inFlight = 0;
    let most = 0;
    await page.route('**/public/payment/*/status', async (r) => {
      most = Math.max(most, ++inFlight);
      await new Promise((done) => setTimeout(done, 7000));
      inFlight--;
      await r.continue().catch(() => {});
    });
    await expect.poll(() => inFlight, { timeout: 10_000 }).toBe(1);
    for (let i = 0; i < 3; i++) {
      await page.evaluate(() => document.dispatchEvent(new Event('visibilitychange')));
      await page.waitForTimeout(1500);
    }
    await page.waitForTimeout(2000);
    expect(most).toBe(1);
    await page.unroute('**/public/payment/*/status');

    // Paid from another device while the portal is open: the card follows without a reload.
    await pay(sub.payment_id);
    await expect.poll(() => card.locator('.status-active').textContent(), { timeout: 20_000 }).toBe('Active');
    expect(await card.getByRole('heading', { name: 'Payment due' }).count()).toBe(0);
    expect(await page.locator('.payment-row .pill-paid').count()).toBe(1);
    await expect.poll(() => page.locator('#announcer').textContent()).toBe('Payment received for Live. Status: Active.');

    // Cancelling fails on the network first: the focus stays on the button, beside the message.
    await page.route('**/public/manage/subscription/*/cancel', (r) => r.abort());
    const cancel = card.getByRole('button', { name: 'Cancel subscription to Live', exact: true });
    await cancel.focus();
    await page.keyboard.press('Enter');
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).press('Enter');
    await expect.poll(() => card.locator('p.status').textContent()).toContain('Could not reach the server');
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Cancel subscription to Live');
    await page.unroute('**/public/manage/subscription/*/cancel');
    await page.keyboard.press('Enter');
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).press('Enter');
    await expect.poll(() => page.locator('#notice').textContent()).toMatch(/^Live is cancelled\. Access continues until /);
    expect(await card.locator('.status-cancelled').textContent()).toBe('Cancelled');
    expect((await admin.get(`/subscriptions/${sub.subscription_id}`)).body.status).toBe('cancelled');
    await check(
      page,
      problems.filter((m) => !/net::ERR_FAILED/.test(m)),
      'portal-no-wallets',
    );

    // The wallets answer again: "Try again" shows them and takes the focus to them.
    await page.unroute('**/public/manage/wallets?*');
    await page.getByRole('button', { name: 'Try again' }).click();
    await expect.poll(() => page.locator('#wallets').textContent()).toContain('No wallet is connected.');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('wallets-heading');
    expect(problems.filter((m) => !/net::ERR_FAILED/.test(m))).toEqual([]);
    await page.close();
  });

  it('checkout: the focus after a failed submit, a passing status error cleared, a visible focus ring', async () => {
    const p = await plan({ name: 'Focus', amount_sats: 500 });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const email = page.getByLabel('E-mail');
    await email.fill('focus@example.com');
    // The focus ring stands out (3:1) from the page and from the grey payment panel.
    await email.focus();
    await page.keyboard.press('Tab');
    const ring = await focusRing(page);
    // The submit button: this plan's seller sends no messages, so no reminder checkbox is between them.
    expect(ring).toMatchObject({ id: 'submit', style: 'solid' });
    expect(contrast(ring.color, ring.bg)).toBeGreaterThanOrEqual(3);

    // The request fails on the network: the focus stays on the button (busy meanwhile).
    await page.route('**/public/subscribe', (r) => r.abort());
    await page.getByRole('button', { name: 'Continue to payment' }).press('Enter');
    await expect.poll(() => page.locator('#form-error').textContent()).toContain('Could not reach the server');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('submit');
    await page.unroute('**/public/subscribe');

    // The status cannot be read for a while, then it can: the error goes.
    let asked = 0;
    await page.route('**/public/payment/*/status', (r) => (asked++, r.abort()));
    await page.keyboard.press('Enter');
    await page.locator('#pay').waitFor();
    const status = page.locator('#payment-status');
    // The page asks again by itself: the person is not told to retry (found from outside: "please retry").
    await expect
      .poll(() => status.textContent(), { timeout: 10_000 })
      .toBe('Still checking your payment… The server cannot be reached just now; this page asks again by itself.');
    // Said once, not again at each failed ask (found from outside: a screen reader heard it every few seconds).
    await page.evaluate(() => {
      const w = window as unknown as { rewrites: number };
      w.rewrites = 0;
      new MutationObserver((m) => (w.rewrites += m.length)).observe(document.getElementById('payment-status')!, {
        childList: true,
        characterData: true,
        subtree: true,
      });
    });
    const since = asked;
    await expect.poll(() => asked, { timeout: 15_000 }).toBeGreaterThanOrEqual(since + 2);
    expect(await page.evaluate(() => (window as unknown as { rewrites: number }).rewrites)).toBe(0);
    await page.unroute('**/public/payment/*/status');
    await page.route('**/public/payment/*/status', (r) =>
      r.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ detail: 'Service did not answer in time, please retry' }) }),
    );
    await expect
      .poll(() => status.textContent(), { timeout: 10_000 })
      .toBe('Still checking your payment… The service did not answer just now; this page asks again by itself.');
    await page.unroute('**/public/payment/*/status');
    await expect.poll(() => status.textContent(), { timeout: 10_000 }).toBe('Waiting for your payment…');
    await page.getByRole('button', { name: 'Copy invoice' }).focus();
    await page.keyboard.press('Shift+Tab');
    await page.keyboard.press('Tab');
    const inPanel = await focusRing(page);
    expect(inPanel.id).toBe('Copy invoice');
    expect(contrast(inPanel.color, inPanel.bg)).toBeGreaterThanOrEqual(3);
    expect(contrast(inPanel.color, 'rgb(255, 255, 255)')).toBeGreaterThanOrEqual(3);
    expect(problems.filter((m) => !/net::ERR_FAILED|status of 503/.test(m))).toEqual([]);
    await page.close();
  });

  it('long unbroken names, URLs and big amounts fit a 360 px screen; no page logs an error', async () => {
    const p = await plan({
      name: `Platinum${'X'.repeat(112)}`,
      description: `Details at https://example.com/${'very-long-path-segment'.repeat(8)}?ref=${'0123456789'.repeat(6)}`,
      amount_sats: 999_999_999_999,
    });
    const ctx = await browser.newContext({ viewport: { width: 360, height: 640 }, isMobile: true, hasTouch: true });
    const { page, problems } = await openPage(ctx);
    const width = () => page.evaluate(() => document.documentElement.scrollWidth);
    await page.goto(p.checkout_url);
    await page.locator('#price').waitFor();
    expect(await width()).toBeLessThanOrEqual(360);
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'long@example.com' })).body;
    await page.goto(sub.manage_url);
    await page.locator(`#sub-${sub.subscription_id}`).getByRole('heading', { name: 'Payment due' }).waitFor();
    await page.locator('#wallets-heading').waitFor();
    expect(await width()).toBeLessThanOrEqual(360);
    await screenshots(page, 'portal-long-names');
    expect(problems).toEqual([]);
    await ctx.close();

    // Without an icon of its own a page makes the browser ask for /favicon.ico, a 404 in the console
    // (the API reference test sees it): each page names its own, and nothing fails.
    const desk = await openPage(await browser.newContext({ viewport: DESKTOP }));
    const errors = allConsoleErrors(desk.page);
    for (const url of [p.checkout_url, sub.manage_url, `${stack.api}/docs`]) {
      await desk.page.goto(url);
      await desk.page.waitForLoadState('networkidle');
      expect(await desk.page.locator('link[rel=icon]').getAttribute('href'), url).toMatch(/^data:image\/svg\+xml,/);
    }
    expect(errors).toEqual([]);
    expect(desk.problems).toEqual([]);
    await desk.page.context().close();
  });

  it('a plan named in Arabic reads right to left on the checkout page and the portal (found from outside)', async () => {
    const p = await plan({ name: RTL_NAME, description: 'منشورات للأعضاء فقط.', amount_sats: 2100 });
    const { page, problems } = await openPage(phone);
    const direction = (sel: string) => page.locator(sel).evaluate((e) => [e.getAttribute('dir'), getComputedStyle(e).direction]);
    await page.goto(p.checkout_url);
    await page.locator('#price').waitFor();
    expect(await direction('h1')).toEqual(['auto', 'rtl']);
    expect(await direction('.description')).toEqual(['auto', 'rtl']);
    const c = await checkout(page, 'Lightning', 'rtl@example.com');
    await page.locator('#pay').waitFor();
    expect(await direction('#pay-heading [dir=auto]')).toEqual(['auto', 'rtl']);
    await page.goto(c.manage_url!);
    expect(await direction(`#sub-${c.subscription_id}-name`)).toEqual(['auto', 'rtl']);
    expect(problems).toEqual([]);
    await page.close();
  });

  /** A plan name whose words are right to left, then left to right: reversed when not isolated. */
  const MIXED_NAME = 'מנוי VIP';
  /** The seller's text inside an element: isolated by a <bdi> or an element with dir=auto, with no invisible isolate characters. */
  const isolated = (el: Locator) =>
    el.evaluate((e, name) => {
      const holder = [...e.querySelectorAll('bdi, [dir=auto]')].find((x) => x.textContent === name);
      return { isolated: !!holder, text: e.textContent, marks: /[\u2066-\u2069\u202a-\u202e]/.test(e.textContent ?? '') };
    }, MIXED_NAME);

  it('a plan named "מנוי VIP" keeps its word order inside sentences on the checkout page and the portal (found from outside)', async () => {
    const p = await plan({ name: MIXED_NAME, amount_sats: 2200 });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const c = await checkout(page, 'Lightning', 'mixed@example.com');
    await page.locator('#pay').waitFor();
    await pay(c.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await isolated(page.locator('#done-message'))).toEqual({
      isolated: true,
      text: `Payment received: your subscription to ${MIXED_NAME} is active.`,
      marks: false,
    });

    await page.goto(c.manage_url!);
    const card = page.locator(`#sub-${c.subscription_id}`);
    const receipt = page.locator('details.receipt').first();
    await receipt.locator('summary').click();
    expect(await isolated(receipt.locator('dt:text-is("Plan") + dd'))).toEqual({ isolated: true, text: MIXED_NAME, marks: false });
    await card.getByRole('button', { name: 'Cancel subscription' }).click();
    expect(await isolated(page.locator('#confirm-title'))).toEqual({ isolated: true, text: `Cancel ${MIXED_NAME}?`, marks: false });
    expect(await page.getByRole('dialog', { name: `Cancel ${MIXED_NAME}?` }).count()).toBe(1);
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
    await expect.poll(() => page.locator('#notice').textContent()).toMatch(/ is cancelled\./);
    expect(await isolated(page.locator('#notice'))).toMatchObject({ isolated: true, marks: false });
    expect(await page.locator('#notice').textContent()).toMatch(new RegExp(`^${MIXED_NAME} is cancelled\\. Access continues until `));

    // Paid while the portal is open: the notice that says so.
    const open = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'mixed-open@example.com' })).body;
    await page.goto(open.manage_url);
    await page.locator(`#sub-${open.subscription_id}`).getByRole('heading', { name: 'Payment due' }).waitFor();
    await pay(open.payment_id);
    await expect.poll(() => page.locator('#notice').textContent(), { timeout: 20_000 }).toMatch(/^Payment received for /);
    expect(await isolated(page.locator('#notice'))).toEqual({ isolated: true, text: `Payment received for ${MIXED_NAME}. Status: Active.`, marks: false });

    // A trial's message, built on the page, and shown again after a reload.
    const t = await plan({ name: MIXED_NAME, amount_sats: 2200, trial_days: 7 });
    await page.goto(t.checkout_url);
    await checkout(page, 'Lightning', 'mixed-trial@example.com');
    await page.locator('#done').waitFor();
    for (const again of [false, true]) {
      if (again) await page.reload();
      await page.locator('#done').waitFor();
      const said = await isolated(page.locator('#done-message'));
      expect(said).toMatchObject({ isolated: true, marks: false });
      expect(said.text).toMatch(new RegExp(`^Your free trial of ${MIXED_NAME} has started\\. It ends on `));
    }
    expect(problems).toEqual([]);
    await page.close();
  });

  it("the dev provider's test payment page is not offered for another plan's payment (found from outside)", async () => {
    const a = await plan({ name: 'Plan A', amount_sats: 3000, allow_lightning: false, allow_cardproc: true });
    const b = await plan({ name: 'Plan B', amount_sats: 9000, allow_lightning: false, allow_cardproc: true });
    const other = (await anon.post('/public/subscribe', { plan_id: b.id, payment_method: 'cardproc', email: 'plan-b@example.com' })).body;
    const { page, problems } = await openPage(phone);
    await page.goto(`${a.checkout_url}?payment=${other.payment_id}&processor=dev`);
    await expect.poll(() => page.locator('#payment-status').textContent()).toMatch(/^This payment is not for this plan\./);
    expect(await page.title()).toMatch(/^Not this plan's payment: Plan A( by .+)?$/);
    expect(await page.getByRole('button', { name: 'Pay (test payment)' }).count()).toBe(0);
    expect((await admin.get(`/subscriptions/${other.subscription_id}`)).body.status).toBe('pending');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('an address and an invoice are shown whole at 360 px, wrapped in their fields (found from outside: cut)', async () => {
    const p = await plan({ name: 'Whole', amount_sats: 4000, allow_onchain: true });
    /** Whether a field shows all its text: nothing left to scroll to inside it, sideways or down. */
    const whole = (field: Locator) => field.evaluate((e) => e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight);
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const chain = await checkout(page, 'On-chain bitcoin', 'whole-chain@example.com');
    const address = page.getByRole('textbox', { name: 'Address' });
    expect(chain.onchain_address!.length).toBeGreaterThanOrEqual(42);
    expect(await address.inputValue()).toBe(chain.onchain_address);
    expect(await whole(address)).toBe(true);
    // Still copied whole by its button, and read-only.
    expect(await address.getAttribute('readonly')).not.toBeNull();
    await page.getByRole('button', { name: 'Copy address' }).click();
    await expect.poll(() => page.locator('#announcer').textContent()).toBe('Address copied');
    await check(page, problems, 'checkout-onchain-whole');
    await page.goto(p.checkout_url);
    const ln = await checkout(page, 'Lightning', 'whole-ln@example.com');
    const invoice = page.getByRole('textbox', { name: 'Invoice' });
    expect(await invoice.inputValue()).toBe(ln.payment_request);
    expect(await whole(invoice)).toBe(true);
    expect(await overflowsHorizontally(page)).toBe(false);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a phone asking for a dark theme gets one, with readable text and the QR code dark on light (found from outside)', async () => {
    const p = await plan({ name: 'Night', amount_sats: 5000 });
    const ctx = await browser.newContext({ viewport: PHONE, isMobile: true, hasTouch: true, colorScheme: 'dark' });
    const { page, problems } = await openPage(ctx);
    const colours = () =>
      page.evaluate(() => {
        const body = getComputedStyle(document.body);
        const root = getComputedStyle(document.documentElement);
        return { bg: root.backgroundColor, fg: body.color };
      });
    await page.goto(p.checkout_url);
    await page.locator('#price').waitFor();
    const { bg, fg } = await colours();
    // Dark: far from white, and the text on it readable (WCAG AA).
    expect(contrast(bg, 'rgb(0, 0, 0)')).toBeLessThan(2);
    expect(contrast(fg, bg)).toBeGreaterThanOrEqual(4.5);
    await check(page, problems, 'checkout-dark');
    const c = await checkout(page, 'Lightning', 'night@example.com');
    const qr = page.getByRole('img', { name: 'QR code of the Lightning invoice' });
    await qr.waitFor();
    const drawn = await qr.evaluate((svg) => ({
      back: svg.querySelector('rect')!.getAttribute('fill'),
      dots: svg.querySelector('path')!.getAttribute('fill'),
      margin: getComputedStyle(svg).backgroundColor,
    }));
    expect(drawn).toEqual({ back: '#fff', dots: '#000', margin: 'rgb(255, 255, 255)' });
    await check(page, problems, 'checkout-lightning-dark');
    await page.goto(c.manage_url!);
    await page.locator('#wallets-heading').waitFor();
    expect((await colours()).bg).toBe(bg);
    await check(page, problems, 'portal-dark');
    await ctx.close();
  });

  it('an unknown plan and a bad or revoked portal token get a clear page', async () => {
    const { page, problems } = await openPage(phone);
    // No plan id at all, or a plan that does not exist: a 404 that says so (found from outside: the API's
    // JSON 404 without a plan id; then the page with 200).
    for (const [path, words] of [
      ['/subscriptions_manager/checkout', 'This checkout link names no plan.'],
      ['/subscriptions_manager/checkout/', 'This checkout link names no plan.'],
      ['/subscriptions_manager/checkout/plan_01JUNKJUNKJUNKJUNKJUNKJUNK', 'does not exist or is no longer offered'],
    ] as const) {
      expect((await page.goto(`${stack.gatewayUrl}${path}`))!.status(), path).toBe(404);
      expect(await page.title(), path).toBe('Plan not found');
      expect(await page.getByRole('heading', { level: 1 }).textContent(), path).toBe('Plan not found');
      expect(await page.locator('main').textContent(), path).toContain(words);
    }
    // Archived while its form is open: the submit ends on the same page, not on a form that cannot succeed.
    const gone = await plan({ name: 'Archived meanwhile', amount_sats: 1000 });
    await page.goto(gone.checkout_url);
    await page.getByLabel('E-mail').fill('late@example.com');
    expect((await admin.del(`/plans/${gone.id}`)).status).toBe(200);
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Plan not found');
    expect(await page.locator('form').count()).toBe(0);
    // Focus on the new view's heading, not dropped to <body> with the button that was pressed.
    expect(await page.evaluate(() => document.activeElement?.tagName)).toBe('H1');
    // Archived while its invoice is shown: the invoice is withdrawn, and no fresh one is offered in vain.
    const goneLater = await plan({ name: 'Archived at the invoice', amount_sats: 1000 });
    await page.goto(goneLater.checkout_url);
    await checkout(page, 'Lightning', 'late2@example.com');
    await page.locator('#pay').waitFor();
    expect((await admin.del(`/plans/${goneLater.id}`)).status).toBe(200);
    await expect.poll(() => page.getByRole('heading', { level: 2 }).textContent(), { timeout: 20_000 }).toBe('This plan is no longer offered');
    expect(await page.title()).toMatch(/^No longer offered: Archived at the invoice( by .+)?$/);
    expect(await page.getByRole('button', { name: 'Get a fresh invoice' }).count()).toBe(0);
    for (const url of [
      `/subscriptions_manager/manage?token=${'0'.repeat(64)}`,
      '/subscriptions_manager/manage',
      '/subscriptions_manager/manage?token=<script>',
    ]) {
      const res = await page.goto(`${stack.gatewayUrl}${url}`);
      expect(res!.status()).toBe(200);
      expect(res!.headers()['referrer-policy']).toBe('no-referrer');
      await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('This link does not work');
      expect(await page.locator('main').textContent()).toContain('ask the seller to send you a new one');
    }
    await check(page, problems, 'portal-bad-link');
    await page.close();
  });

  it('NWC: a wallet that answers after the wait is said to have not paid yet, with no advice to pay another way (found from outside)', async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    // Past this stack's NWC_REPLY_TIMEOUT_MS (4 s): the charge gives up, the wallet pays a second later.
    wallet.setBehaviour({ pay: true, delayMs: 5000 });
    const p = await plan({ name: 'Slow wallet', amount_sats: 1500, allow_nwc: true });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('slow-wallet-page@example.com');
    await page.getByLabel('Wallet connection string').fill(wallet.connectionString());
    const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe/nwc'));
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    const body = await (await answer).json();
    expect(body).toMatchObject({ status: 'pending', may_still_pay: true });
    await expect
      .poll(() => page.locator('#form-error').textContent())
      .toBe(
        'Your wallet has not paid the first invoice yet: The wallet did not answer the payment request within 4 seconds. It may still pay it in the next few minutes: look at the subscription again then, before you pay another way. The page of your subscription shows it.',
      );
    expect(await page.locator('#form-error').textContent()).not.toContain('another wallet');
    expect(await page.locator('#portal-link').getAttribute('href')).toBe(body.manage_url);
    await check(page, problems, 'checkout-nwc-may-still-pay');
    // Its payment, made after the answer, activates the subscription that page links to.
    await expect.poll(async () => (await admin.get(`/subscriptions/${body.subscription_id}`)).body.status, { timeout: 30_000 }).toBe('active');
    await page.close();
  });

  it('NWC: checkout with a wallet (checked before submit), then the portal lists, disconnects and connects wallets', async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    const p = await plan({ name: 'Auto', amount_sats: 1500, allow_nwc: true });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('nwc@example.com');
    // A malformed string is refused on the page, before anything is sent.
    await page.getByLabel('Wallet connection string').fill('nostr+walletconnect://abc');
    // One press, straight from the field (found from outside: the field's own check on leaving it pushed
    // the button down under the pointer, and the first press did nothing).
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    expect(await page.locator('#nwc-error').textContent()).toBe('The wallet key in the connection string must be 64 hexadecimal characters.');
    await expect.poll(() => page.locator('#form-error').textContent()).toBe('Please correct the marked fields.');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('nwc');
    // Well formed, refused by the service: its words, as a sentence (found from outside: no full stop).
    const plain = wallet.connectionString().replace(/relay=[^&]+/, `relay=${encodeURIComponent('ws://relay.example.com')}`);
    await page.getByLabel('Wallet connection string').fill(plain);
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    // Why under the field, what to do next in the alert (found from outside: the same words twice).
    await expect
      .poll(() => page.locator('#form-error').textContent())
      .toBe('Your wallet could not be used. Paste another connection string, or choose another way to pay.');
    expect(await page.locator('#nwc-error').textContent()).toBe('The relay relay.example.com uses unencrypted ws://; use a wss:// relay.');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('nwc');
    await page.getByLabel('Wallet connection string').fill(wallet.connectionString());
    const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe/nwc'));
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    const body = await (await answer).json();
    await page.locator('#done').waitFor({ timeout: 30_000 });
    expect(await page.locator('#done-message').textContent()).toBe('Your wallet paid 1,500 sats: your subscription to Auto is active.');
    await page.getByRole('link', { name: 'Manage your subscription' }).click();
    await page.getByRole('heading', { name: 'Wallets for automatic payments' }).waitFor();
    const wallets = page.locator('ul.wallets > li');
    // The wallets come from another service, after the subscriptions.
    await wallets.first().waitFor();
    expect(await wallets.count()).toBe(1);
    expect(await wallets.first().textContent()).toContain(`Wallet ${wallet.pubkey.slice(0, 8)}… · Connected`);
    await check(page, problems, 'portal-wallets');

    await wallets
      .first()
      .getByRole('button', { name: /^Disconnect/ })
      .click();
    await page.getByRole('dialog').getByRole('button', { name: 'Disconnect wallet' }).click();
    await expect.poll(() => page.locator('#notice').textContent()).toBe('Wallet disconnected: it pays nothing more; any further renewal is paid by invoice.');
    expect(await page.locator('ul.wallets > li').first().textContent()).toContain('· Disconnected');
    const { rows } = await stack.db.query('SELECT is_active FROM nwc.connections WHERE subscription_id = $1', [body.subscription_id]);
    expect(rows).toEqual([{ is_active: false }]);
    await expect
      .poll(async () => (await stack.db.query('SELECT nwc_fallback FROM billing.subscriptions WHERE id = $1', [body.subscription_id])).rows[0].nwc_fallback)
      .toBe(true);

    // Connect another wallet: a malformed string is refused on the page, a good one is checked and stored.
    const other = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(other);
    const form = page.locator('#connect-form');
    await form
      .getByRole('group', { name: 'Subscription' })
      .getByRole('radio', { name: /^Auto / })
      .check();
    await form.getByLabel('Wallet connection string').fill('nostr+walletconnect://');
    await form.getByRole('button', { name: 'Connect wallet' }).click();
    expect(await page.locator('#connect-nwc-error').textContent()).toBe('The wallet key in the connection string must be 64 hexadecimal characters.');
    await form.getByLabel('Wallet connection string').fill(other.connectionString());
    const connected = page.waitForResponse((r) => r.url().endsWith('/public/manage/wallets') && r.request().method() === 'POST');
    await form.getByRole('button', { name: 'Connect wallet' }).click();
    expect((await connected).status()).toBe(201);
    await expect
      .poll(() => page.locator('#notice').textContent())
      .toBe(`Wallet ${other.pubkey.slice(0, 8)}… connected: it pays the renewals of Auto (1,500 sats per month) from now on.`);
    expect(await page.locator('ul.wallets > li').first().textContent()).toContain(`Wallet ${other.pubkey.slice(0, 8)}… · Connected`);
    const after = await stack.db.query('SELECT wallet_pubkey, is_active FROM nwc.connections WHERE subscription_id = $1 ORDER BY created_at, id', [
      body.subscription_id,
    ]);
    expect(after.rows).toEqual([
      { wallet_pubkey: wallet.pubkey, is_active: false },
      { wallet_pubkey: other.pubkey, is_active: true },
    ]);
    expect((await stack.db.query('SELECT nwc_fallback FROM billing.subscriptions WHERE id = $1', [body.subscription_id])).rows[0].nwc_fallback).toBe(false);
    // The new wallet pays the next renewal by itself.
    expect((await admin.post('/dev/clock', { advance_seconds: 31 * 86400 })).status).toBe(200);
    await expect.poll(() => other.requests.length, { timeout: 30_000 }).toBeGreaterThan(0);
    expect(problems).toEqual([]);
    await page.close();
  });

  // Last: it moves the stack's clock an hour on.
  it('a plan notifying by Telegram and Nostr: checkout with only a chat id, or only an npub; a bad npub is refused in words', async () => {
    const p = await plan({ name: 'Chat club', amount_sats: 4000, trial_days: 7 });
    const put = await admin.put(`/plans/${p.id}/notification-settings`, {
      inherit: false,
      channels: { messenger: { bot_token: BOT_TOKEN }, nostr: { generate_key: true, relays: [relay.url] } },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    // The bot's name is known once the notifier polled it.
    const shown = await until(
      async () => (await anon.get(`/public/plan/${p.id}`)).body,
      (b: any) => b.messenger_bot !== undefined,
    );
    expect(shown).toMatchObject({ available_contact_methods: ['messenger', 'nostr'], messenger_bot: 'shop7101_bot' });
    /** Starts the trial and answers the subscriber as the API and the database hold it. */
    const subscribed = async (page: Page) => {
      const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
      await page.keyboard.press('Enter');
      const res = await answer;
      expect(res.status()).toBe(201);
      await page.locator('#done').waitFor();
      const sub = (await admin.get(`/subscriptions/${(await res.json()).subscription_id}`)).body;
      const who = (await admin.get(`/subscribers/${sub.subscriber_id}`)).body;
      const [row] = (await stack.db.query('SELECT contact_preference FROM billing.subscribers WHERE id = $1', [who.id])).rows;
      return { ...who, contact_preference: row.contact_preference };
    };

    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const chat = page.getByLabel('Telegram username');
    const npubField = page.getByLabel('Nostr address (npub or name@domain)');
    const pref = page.getByLabel('Send reminders and receipts by');
    await chat.waitFor();
    expect(await page.getByLabel('E-mail').count()).toBe(0);
    expect(await page.locator('#contact-messenger-hint').textContent()).toBe(
      'Enter your username (like @alice) or numeric chat id, and press Start on @shop7101_bot in Telegram: messages reach you from then on.',
    );
    expect(await page.getByRole('link', { name: '@shop7101_bot' }).getAttribute('href')).toBe('https://t.me/shop7101_bot');
    expect(await pref.locator('option').allTextContents()).toEqual(['Telegram', 'Nostr']);
    await check(page, problems, 'checkout-contacts');

    // Keyboard only: the chat id field, then the Nostr field, then the preference.
    const focused = () => page.evaluate(() => document.activeElement?.id);
    await chat.focus();
    await page.keyboard.press('Tab');
    expect(await focused()).toBe('contact-nostr');
    // A malformed npub is refused by the API (422) and said in words; typing it made Nostr the preference.
    await page.keyboard.type('npub1notakey');
    await page.keyboard.press('Tab');
    expect(await focused()).toBe('contact-preference');
    expect(await pref.inputValue()).toBe('nostr');
    await page.keyboard.press('Tab');
    await page.keyboard.press('Tab');
    expect(await focused()).toBe('submit');
    const refused = page.waitForResponse((r) => r.url().endsWith('/public/subscribe'));
    await page.keyboard.press('Enter');
    expect((await refused).status()).toBe(422);
    // The service's answer names the field: shown at it, as the page's own checks are, and focused.
    await expect
      .poll(() => page.locator('#contact-nostr-error').textContent())
      .toBe('Enter an npub, a public key of 64 hex characters, or a NIP-05 identifier (name@domain).');
    expect(await npubField.getAttribute('aria-invalid')).toBe('true');
    expect(await npubField.getAttribute('aria-describedby')).toContain('contact-nostr-error');
    expect(await page.locator('#form-error').textContent()).toBe('Please correct the marked fields.');
    expect(await focused()).toBe('contact-nostr');
    expect(await page.locator('#done').count()).toBe(0);

    // Only a chat id (of a chat that started the bot, as the hint asks), picked as the preference.
    tg.chats.add('424242');
    await npubField.fill('');
    await chat.focus();
    await page.keyboard.type('424242');
    // A preference for a contact left empty is caught on the page, in words that keep Nostr's capital.
    await pref.selectOption('nostr');
    await page.getByRole('button', { name: 'Start free trial' }).click();
    await expect
      .poll(() => page.locator('#contact-nostr-error').textContent())
      .toBe('Enter your Nostr address (npub or name@domain), or choose another way below.');
    await pref.selectOption('messenger');
    await chat.focus();
    expect(await subscribed(page)).toMatchObject({ messenger: '424242', nostr: null, email: null, contact_preference: 'messenger' });
    await until(
      async () => tg.sent.filter((m) => String(m.chat_id) === '424242'),
      (m) => m.length > 0,
    );
    expect(tg.sent.find((m) => String(m.chat_id) === '424242')!.text).toContain('Chat club');
    await check(page, problems, 'checkout-contacts-done');

    // Only an npub: the preference follows the one contact given.
    const sk = generateSecretKey();
    const npub = nip19.npubEncode(getPublicKey(sk));
    // The option already shown, picked with the pointer or a key (no `change`), stays picked too (found from
    // outside: it followed the next contact typed); moving through it with Tab is no pick.
    for (const pick of [() => pref.click(), () => pref.focus().then(() => page.keyboard.press(' '))]) {
      await page.goto(p.checkout_url);
      await pick();
      await page.keyboard.press('Escape');
      await npubField.fill(`nostr:${npub}`);
      expect(await pref.inputValue()).toBe('messenger');
    }
    // Nor a screen reader's command keys, Escape or a shortcut on the way (found in review: each was a pick).
    await page.goto(p.checkout_url);
    await pref.focus();
    for (const key of ['Insert', 'CapsLock', 'CapsLock', 'Escape', 'Control+c']) await page.keyboard.press(key);
    await page.keyboard.press('Tab');
    await npubField.fill(`nostr:${npub}`);
    expect(await pref.inputValue()).toBe('nostr');
    await page.goto(p.checkout_url);
    // A preference the person picked stays while they type another contact first (found from outside: it
    // followed the typing, silently); one not picked follows the first contact typed, as above.
    await pref.selectOption('nostr');
    await chat.fill('424243');
    expect(await pref.inputValue()).toBe('nostr');
    await chat.fill('');
    // As many Nostr apps copy it (a NIP-21 link): the key itself is sent (found from outside: refused).
    await npubField.fill(`nostr:${npub}`);
    expect(await pref.inputValue()).toBe('nostr');
    await npubField.focus();
    expect(await subscribed(page)).toMatchObject({ messenger: null, nostr: npub, email: null, contact_preference: 'nostr' });
    // A gift-wrapped direct message to that key reaches the plan's relay.
    const wraps = await until(
      async () => relay.received.filter((e) => e.kind === 1059 && e.tags.some((t) => t[0] === 'p' && t[1] === getPublicKey(sk))),
      (e) => e.length > 0,
    );
    expect(wraps.length).toBeGreaterThan(0);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('on-chain, Back, then Lightning for the same contact: this tab offers its payment, another tab the same help paid or not (found from outside)', async () => {
    const p = await plan({ name: 'Chain first', amount_sats: 6000, allow_onchain: true });
    const email = 'chain-first@example.com';
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const c = await checkout(page, 'On-chain bitcoin', email);
    await page.locator('#pay').waitFor();
    // The invoice is shown: the live region no longer says it is being created (found from outside).
    await page.waitForTimeout(300);
    expect(await page.locator('#announcer').textContent()).toBe('');
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    /** Submits the form by Lightning; answers the 409's detail. */
    const lightning = async (tab: Page) => {
      await tab.getByRole('radio', { name: 'Lightning' }).check();
      await tab.getByLabel('E-mail').fill(email);
      const refused = tab.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
      await tab.getByRole('button', { name: 'Continue to payment' }).click();
      const res = await refused;
      expect(res.status()).toBe(409);
      return ((await res.json()) as { detail: string }).detail;
    };
    // The same words as for a paid subscription: whoever types an address must not learn whether that
    // person has paid (found from outside).
    expect(await lightning(page)).toBe(SUBSCRIBED_DETAIL);
    const error = page.locator('#form-error');
    await expect.poll(() => error.textContent()).toBe('You have an open checkout for this plan: Show its payment');
    await page.waitForTimeout(300);
    expect(await page.locator('#announcer').textContent()).toBe('');
    await check(page, problems, 'checkout-open-in-this-tab');
    await error.getByRole('button', { name: 'Show its payment' }).click();
    await page.locator('#pay').waitFor();
    expect(await page.getByRole('textbox', { name: 'Address' }).inputValue()).toBe(c.onchain_address);
    expect(new URL(page.url()).searchParams.get('payment')).toBe(c.payment_id);

    // Another tab does not hold it: the way on, whether it was paid or not.
    const other = await openPage(phone);
    await other.page.goto(p.checkout_url);
    await lightning(other.page);
    const otherError = other.page.locator('#form-error');
    await expect.poll(() => otherError.textContent()).toBe(NEUTRAL_HELP);
    // The focused button and the help above it are in sight on the phone (found from outside: the help
    // pushed the button below the fold, nothing scrolled).
    const submitBox = await other.page.getByRole('button', { name: 'Continue to payment' }).boundingBox();
    const viewport = other.page.viewportSize()!;
    // (Within a pixel: a box's edges fall between device pixels.)
    expect(submitBox!.y + submitBox!.height).toBeLessThanOrEqual(viewport.height + 1);
    expect(submitBox!.y).toBeGreaterThanOrEqual(0);
    // Paid: now it is a subscription, and its link was shown when it started.
    await pay(c.payment_id);
    const active = await until(
      () => admin.get(`/subscriptions/${c.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    expect(active.body.status).toBe('active');
    // Paid, the page says just the same: it cannot tell, and neither can whoever typed the address.
    await other.page.reload();
    expect(await lightning(other.page)).toBe(SUBSCRIBED_DETAIL);
    await expect.poll(() => otherError.textContent()).toBe(NEUTRAL_HELP);
    expect(other.problems).toEqual([]);
    await other.page.close();
    await page.close();
  });

  it('Lightning, Back, then on-chain for the same contact: the checkout that replaced it shows the link this tab was given (found from outside: lost)', async () => {
    const p = await plan({ name: 'Switched', amount_sats: 5000, allow_onchain: true });
    const email = 'switched@example.com';
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const first = await checkout(page, 'Lightning', email);
    expect(first.manage_url).toMatch(/token=/);
    await page.locator('#pay').waitFor();
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    // The form as it was sent (found from outside: Back cleared the e-mail).
    expect(await page.getByLabel('E-mail').inputValue()).toBe(email);
    expect(await page.getByRole('radio', { name: 'Lightning' }).isChecked()).toBe(true);
    // Only on the way back: the link opened again in this tab (the next person at it) is an empty form.
    await page.goto(p.checkout_url);
    await page.locator('#checkout-form').waitFor();
    expect(await page.getByLabel('E-mail').inputValue()).toBe('');
    // Another method for the same contact replaces the unpaid checkout; the service answers it without a
    // link (whoever sent it only proved to know the address).
    const second = await checkout(page, 'On-chain bitcoin', email);
    expect(second.manage_url ?? null).toBeNull();
    expect(second.payment_id).not.toBe(first.payment_id);
    await page.locator('#pay').waitFor();
    await pay(second.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(first.manage_url);
    expect(await page.locator('#link-elsewhere').count()).toBe(0);
    // Left by Back, the result is forgotten with every copy of its link (the next person at this tab).
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    const kept = await page.evaluate(() => Object.keys(sessionStorage).map((k) => sessionStorage.getItem(k) ?? ''));
    expect(kept.filter((v) => v.includes(new URL(first.manage_url!).searchParams.get('token')!))).toEqual([]);
    // The form is empty once subscribed (the next person at this tab).
    expect(await page.getByLabel('E-mail').inputValue()).toBe('');
    // The link still opens this person's portal, with the subscription that was paid.
    const token = new URL(first.manage_url!).searchParams.get('token')!;
    const portal = await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': token } });
    expect(portal.body.items.map((x: { id: string; status: string }) => [x.id, x.status])).toContainEqual([second.subscription_id, 'active']);
    // Another tab, the same contact on another method after the first was paid: refused, no link.
    const other = await openPage(phone);
    await other.page.goto(p.checkout_url);
    await other.page.getByRole('radio', { name: 'Lightning' }).check();
    await other.page.getByLabel('E-mail').fill(email);
    const refused = other.page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await other.page.getByRole('button', { name: 'Continue to payment' }).click();
    expect((await refused).status()).toBe(409);
    await expect.poll(() => other.page.locator('#form-error').textContent()).toBe(NEUTRAL_HELP);
    expect(await other.page.getByRole('link', { name: 'Manage your subscription' }).count()).toBe(0);
    expect(problems).toEqual([]);
    await other.page.close();
    await page.close();
  });

  it('the form comes back as sent when the page itself is loaded by Back, and after two quick Backs (found in review: untested)', async () => {
    const p = await plan({ name: 'Drafted', amount_sats: 5200, allow_onchain: true, allow_walletproc: true });
    const email = 'drafted@example.com';
    const { page, problems } = await openPage(phone);
    const sameDocument = () =>
      page.evaluate(() => [
        (window as unknown as { sbSameDocument?: boolean }).sbSameDocument ?? false,
        (performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming).type,
      ]);
    const markDocument = () =>
      page.evaluate(() => {
        (window as unknown as { sbSameDocument: boolean }).sbSameDocument = true;
      });
    await page.goto(p.checkout_url);
    const w = await checkout(page, 'Online wallet (PayPal)', email);
    // Off to the processor's page in this tab, and Back twice without paying: the form as it was sent.
    const procUrl = await page.getByRole('link', { name: /Pay with your online wallet/ }).getAttribute('href');
    await page.goto(procUrl!);
    await page.getByRole('button', { name: 'Cancel' }).waitFor();
    await page.goBack();
    await page.getByRole('heading', { name: 'Pay 5,200 sats for Drafted' }).waitFor();
    expect(new URL(page.url()).search).toBe(`?payment=${w.payment_id}`);
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    expect(await page.getByLabel('E-mail').inputValue()).toBe(email);
    expect(await page.getByRole('radio', { name: 'Online wallet (PayPal)' }).isChecked()).toBe(true);
    // The form's own entry loaded anew by Back (another page in between): filled in as well.
    await markDocument();
    await page.goto('about:blank');
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    expect(await sameDocument()).toEqual([false, 'back_forward']);
    expect(await page.getByLabel('E-mail').inputValue()).toBe(email);
    expect(await page.getByRole('radio', { name: 'Online wallet (PayPal)' }).isChecked()).toBe(true);
    // Sent again by another method: kept as sent this time.
    await checkout(page, 'On-chain bitcoin', email);
    await page.locator('#pay').waitFor();

    // Two Backs in quick succession (the payment, then the form) while the plan is slow to answer: the
    // first Back's view is not drawn over the second's, and the form still comes back as sent.
    await page.evaluate(() => {
      location.hash = 'pay';
    });
    // Only the first Back's lookup is slow: it answers after the second's (found in review: both the same
    // delay answered in order, and the test passed without the view counter).
    let lookups = 0;
    await page.route('**/public/plan/*', async (route) => {
      if (lookups++ === 0) await new Promise((r) => setTimeout(r, 2500));
      await route.continue();
    });
    await page.evaluate(() => {
      addEventListener('popstate', () => history.back(), { once: true });
      history.back();
    });
    await page.locator('#checkout-form').waitFor();
    expect(await page.getByLabel('E-mail').inputValue()).toBe(email);
    expect(await page.getByRole('radio', { name: 'On-chain bitcoin' }).isChecked()).toBe(true);
    // Typed into meanwhile: the first Back's answer, coming last, draws nothing over it.
    await page.getByLabel('E-mail').fill('typed-meanwhile@example.com');
    await expect.poll(() => lookups).toBe(2);
    await page.waitForTimeout(3000);
    await page.unroute('**/public/plan/*');
    expect(new URL(page.url()).search).toBe('');
    expect(await page.locator('#pay').count()).toBe(0);
    expect(await page.getByLabel('E-mail').inputValue()).toBe('typed-meanwhile@example.com');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a checkout whose answer was lost, sent again: the same checkout with its portal link (found from outside: "was shown when you first subscribed")', async () => {
    const p = await plan({ name: 'Lost answer', amount_sats: 5400 });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByLabel('E-mail').fill('lost-answer@example.com');
    // The service makes the checkout; its answer never reaches the page (a connection dropped on the way back).
    const keys: (string | undefined)[] = [];
    let made: { payment_id: string; manage_url: string } | undefined;
    await page.route('**/public/subscribe', async (route) => {
      keys.push(route.request().headers()['idempotency-key']);
      const res = await route.fetch();
      made = await res.json();
      await route.abort('connectionreset');
    });
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    await expect.poll(() => page.locator('#form-error').textContent()).toBe('Could not reach the server. Check your connection and try again.');
    await page.unroute('**/public/subscribe');
    expect(made?.manage_url).toMatch(/token=/);
    // Sent again as it was: the service's answer is the checkout already made, with its link.
    const again = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    const res = await again;
    expect(res.status()).toBe(201);
    expect(res.request().headers()['idempotency-key']).toBe(keys[0]);
    expect(keys[0]).toMatch(/^[0-9a-f]{32}$/);
    const body = await res.json();
    expect(body.payment_id).toBe(made!.payment_id);
    expect(body.manage_url).toBe(made!.manage_url);
    await page.locator('#pay').waitFor();
    await pay(body.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(made!.manage_url);
    expect(await page.locator('#link-elsewhere').count()).toBe(0);
    expect(problems.filter((x) => !x.includes('ERR_CONNECTION_RESET') && !x.includes('Failed to load resource'))).toEqual([]);
    await page.close();
  });

  it('a lost answer is not retried by the same key after Back and Forward: the next person at the tab gets no link (found in review)', async () => {
    const p = await plan({ name: 'Lost then back', amount_sats: 5450 });
    const { page } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByLabel('E-mail').fill('lost-back@example.com');
    const keys: (string | undefined)[] = [];
    await page.route('**/public/subscribe', async (route) => {
      keys.push(route.request().headers()['idempotency-key']);
      await route.fetch();
      await route.abort('connectionreset');
    });
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    await expect.poll(() => page.locator('#form-error').textContent()).toBe('Could not reach the server. Check your connection and try again.');
    await page.unroute('**/public/subscribe');
    // Away by Back and here again by Forward (someone else at this tab), the same form sent again.
    await page.evaluate(() => {
      location.hash = 'away';
    });
    await page.goBack();
    await page.goForward();
    await page.locator('#checkout-form').waitFor();
    await page.getByLabel('E-mail').fill('lost-back@example.com');
    const again = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    const res = await again;
    expect(keys[0]).toMatch(/^[0-9a-f]{32}$/);
    expect(res.request().headers()['idempotency-key']).not.toBe(keys[0]);
    // A new request for a known contact: its checkout, without the link (the same key would replay it).
    expect(res.status()).toBe(201);
    expect((await res.json()).manage_url ?? null).toBeNull();
    await page.close();
  });

  it('a payment made after its request expired, or after the plan was withdrawn, is still followed and said as it is (found from outside)', async () => {
    const { page, problems, c } = await expiredLightningCheckout('Paid late', 5500, 'paid-late@example.com');
    expect(await page.locator('#payment-status').textContent()).toContain('This payment request expired before it was paid. Nothing was charged.');
    // Paid after all (a wallet that paid at the last moment): recorded as paid, and the page says so.
    await pay(c.payment_id);
    await page.locator('#done').waitFor({ timeout: 30_000 });
    expect(await page.locator('#done-message').textContent()).toBe('Payment received: your subscription to Paid late is active.');
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(c.manage_url);
    expect((await admin.get(`/subscriptions/${c.subscription_id}`)).body.status).toBe('active');

    // The plan withdrawn while its invoice is shown: said so, with no fresh invoice to ask in vain.
    const gone = await plan({ name: 'Withdrawn', amount_sats: 5600 });
    await page.goto(gone.checkout_url);
    const w = await checkout(page, 'Lightning', 'withdrawn@example.com');
    await page.locator('#pay').waitFor();
    expect((await admin.del(`/plans/${gone.id}`)).status).toBe(200);
    await expect.poll(() => page.getByRole('heading', { level: 2 }).textContent(), { timeout: 20_000 }).toBe('This plan is no longer offered');
    expect(await page.locator('#payment-status').textContent()).toBe(
      'The seller stopped offering this plan: it can no longer be paid for here. Nothing was charged.',
    );
    expect(await page.getByRole('button', { name: 'Get a fresh invoice' }).count()).toBe(0);
    // Paid anyway, while billing is away: recorded as paid, not yet applied or refused, so not said active
    // (found in review: "paid" was said active before billing could say it came too late).
    await stack.stopBilling();
    try {
      await pay(w.payment_id);
      await expect.poll(() => page.locator('#payment-status').textContent(), { timeout: 30_000 }).toBe('Payment received. Starting your subscription…');
      expect(await page.getByRole('heading', { level: 2 }).textContent()).toBe('Payment received');
      expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(w.manage_url);
      expect((await anon.get(`/public/payment/${w.payment_id}/status`)).body).toEqual({
        payment_id: w.payment_id,
        status: 'paid',
        paid_at: expect.any(Number),
        subscription_id: w.subscription_id,
        plan_id: gone.id,
        purpose: 'checkout',
        applied: false,
      });
      await page.waitForTimeout(3000);
      expect(await page.locator('#done').count()).toBe(0);
    } finally {
      await stack.restartBilling();
    }
    // Billing back: not applied, and the payer is told to expect a refund.
    await page.locator('#paid-late').waitFor({ timeout: 30_000 });
    expect(await page.getByRole('heading', { level: 2 }).textContent()).toBe('Payment received too late');
    expect(await page.locator('#late-message').textContent()).toBe(
      'Your payment arrived after this checkout had ended, so it did not start a subscription. The seller is told to refund it; please contact them.',
    );
    expect((await anon.get(`/public/payment/${w.payment_id}/status`)).body).toMatchObject({ status: 'paid', unapplied: true });
    // An applied payment says so.
    expect((await anon.get(`/public/payment/${c.payment_id}/status`)).body).toMatchObject({ status: 'paid', applied: true });
    // A reload says the same, not "You are subscribed".
    await page.reload();
    await page.locator('#paid-late').waitFor({ timeout: 20_000 });
    expect(await page.locator('#done').count()).toBe(0);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('an invoice replaced by a fresh one and paid late starts the subscription, said on the page and where the processor returns (found in review)', async () => {
    const { p, page, problems, c } = await expiredLightningCheckout('Replaced late', 5700, 'replaced-late@example.com');
    // The same payment in another tab, as a processor's return link or a bookmark names it: expired.
    const { page: other, problems: otherProblems } = await openPage(phone);
    await other.goto(`${p.checkout_url}?payment=${encodeURIComponent(c.payment_id)}`);
    await expect.poll(() => other.locator('#payment-status').textContent()).toContain('This payment expired before it was paid. Nothing was charged.');
    expect(await other.title()).toMatch(/^Payment expired: Replaced late( by .+)?$/);
    const freshAnswer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await page.getByRole('button', { name: 'Get a fresh invoice' }).click();
    const fresh = await (await freshAnswer).json();
    await page.getByRole('heading', { name: 'Pay 5,700 sats for Replaced late' }).waitFor();
    expect(new URL(page.url()).search).toBe(`?payment=${fresh.payment_id}`);
    // The first invoice paid after all: it starts the subscription, and the fresh one is withdrawn.
    await pay(c.payment_id);
    await page.locator('#done').waitFor({ timeout: 30_000 });
    expect(await page.locator('#done-message').textContent()).toBe('Payment received: your subscription to Replaced late is active.');
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(c.manage_url);
    await other.locator('#done').waitFor({ timeout: 30_000 });
    expect(await other.locator('#done-message').textContent()).toBe('Payment received: your subscription to Replaced late is active.');
    expect((await admin.get(`/subscriptions/${c.subscription_id}`)).body.status).toBe('active');
    expect((await anon.get(`/public/payment/${fresh.payment_id}/status`)).body).toMatchObject({ status: 'expired', replaced_by: c.payment_id });
    expect(problems).toEqual([]);
    expect(otherProblems).toEqual([]);
    await other.close();
    await page.close();
  });

  it("a new checkout started by the contact's earlier one paid late says subscribed, open or run out, not a fresh invoice refused (found from outside)", async () => {
    const p = await plan({ name: 'Earlier paid', amount_sats: 5800 });
    /** A checkout of the plan for `email` left to expire (a day), then a new one opened on the page. */
    const afterAnExpired = async (email: string) => {
      const earlier = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email })).body;
      expect((await admin.post('/dev/clock', { advance_seconds: 86_400 + 60 })).status).toBe(200);
      await until(
        () => admin.get(`/subscriptions/${earlier.subscription_id}`),
        (r) => r.body.status === 'expired',
      );
      const { page, problems } = await openPage(phone);
      await page.goto(p.checkout_url);
      const c = await checkout(page, 'Lightning', email);
      expect(c.subscription_id).not.toBe(earlier.subscription_id);
      await page.locator('#pay').waitFor();
      return { earlier, page, problems, c };
    };
    const subscribed = 'Payment received: your subscription to Earlier paid is active.';

    // Its invoice open: withdrawn, and the page follows the payment that paid instead.
    const open = await afterAnExpired('earlier-open@example.com');
    await pay(open.earlier.payment_id);
    await open.page.locator('#done').waitFor({ timeout: 30_000 });
    expect(await open.page.locator('#done-message').textContent()).toBe(subscribed);
    expect((await admin.get(`/subscriptions/${open.c.subscription_id}`)).body.status).toBe('active');
    expect((await anon.get(`/public/payment/${open.c.payment_id}/status`)).body).toMatchObject({
      status: 'expired',
      replaced_by: open.earlier.payment_id,
    });
    // The owner sees why it is not due either.
    expect((await admin.get(`/payments/${open.c.payment_id}`)).body).toMatchObject({ status: 'expired', replaced_by: open.earlier.payment_id });
    // And the portal, beside the subscription it started: not "Expired, not paid".
    await open.page.goto(open.earlier.manage_url);
    const row = open.page.locator('.payment-row', { hasText: 'Not due' });
    await row.waitFor();
    expect(await row.textContent()).toContain('Another payment of yours started this subscription: nothing is due on this one.');
    expect(await open.page.locator('.payment-row', { hasText: 'Expired, not paid' }).count()).toBe(0);
    expect(open.problems).toEqual([]);
    await open.page.close();

    // Its invoice run out first (the page offers a fresh one): the late payment is found, not a 409.
    const ran = await afterAnExpired('earlier-ran-out@example.com');
    expect((await admin.post('/dev/clock', { advance_seconds: 3700 })).status).toBe(200);
    await ran.page.getByRole('button', { name: 'Get a fresh invoice' }).waitFor({ timeout: 20_000 });
    await pay(ran.earlier.payment_id);
    await ran.page.locator('#done').waitFor({ timeout: 30_000 });
    expect(await ran.page.locator('#done-message').textContent()).toBe(subscribed);
    expect((await anon.get(`/public/payment/${ran.c.payment_id}/status`)).body).toMatchObject({
      status: 'expired',
      replaced_by: ran.earlier.payment_id,
    });
    // Where a processor's return link or a bookmark names it: the same.
    const { page: named, problems: namedProblems } = await openPage(phone);
    await named.goto(`${p.checkout_url}?payment=${encodeURIComponent(ran.c.payment_id)}`);
    await named.locator('#done').waitFor({ timeout: 30_000 });
    expect(await named.locator('#done-message').textContent()).toBe(subscribed);
    expect(ran.problems).toEqual([]);
    expect(namedProblems).toEqual([]);
    await named.close();
    await ran.page.close();
  });

  it('paid after a cancel: "too late" with the plan, in the title, and at once after a reload (found in review: "Paid for", then an invoice)', async () => {
    const p = await plan({ name: 'Cancelled first', amount_sats: 5800 });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const c = await checkout(page, 'Lightning', 'cancelled-first@example.com');
    await page.locator('#pay').waitFor();
    expect((await admin.post(`/subscriptions/${c.subscription_id}/cancel`, { immediate: true })).status).toBe(200);
    await page.getByRole('heading', { name: 'Payment request expired' }).waitFor({ timeout: 20_000 });
    await pay(c.payment_id);
    await page.locator('#paid-late').waitFor({ timeout: 30_000 });
    expect(await page.title()).toMatch(/^Payment received too late: Cancelled first by /);
    expect(await page.locator('h1').textContent()).toBe('Cancelled first');
    await page.reload();
    await page.locator('#paid-late, #pay').first().waitFor();
    expect(await page.locator('#pay').count()).toBe(0);
    expect(await page.locator('#paid-late').count()).toBe(1);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a fresh invoice whose answer comes after Back is not drawn over the form (found in review)', async () => {
    const { page, problems } = await expiredLightningCheckout('Slow fresh', 5900, 'slow-fresh@example.com');
    await page.route('**/public/subscribe', async (route) => {
      await new Promise((r) => setTimeout(r, 1500));
      await route.continue();
    });
    const answered = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await page.getByRole('button', { name: 'Get a fresh invoice' }).click();
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    expect((await answered).status()).toBe(201);
    await page.waitForTimeout(1000);
    await page.unroute('**/public/subscribe');
    expect(new URL(page.url()).search).toBe('');
    expect(await page.locator('#pay').count()).toBe(0);
    expect(await page.locator('#checkout-form').count()).toBe(1);
    expect(problems).toEqual([]);
    await page.close();
  });

  it("a fresh invoice refused by a conflict other than the contact's keeps its button, which then works (found in review: untested)", async () => {
    const p = await plan({ name: 'Conflicted', amount_sats: 5300 });
    const { page } = await openPage(phone);
    await page.goto(p.checkout_url);
    const c = await checkout(page, 'Lightning', 'conflicted@example.com');
    await page.locator('#pay').waitFor();
    // The invoice runs out, and the page offers a fresh one.
    expect((await admin.post('/dev/clock', { advance_seconds: 3700 })).status).toBe(200);
    await until(
      () => anon.get(`/public/payment/${c.payment_id}/status`),
      (r) => r.body.status === 'expired',
    );
    const again = page.getByRole('button', { name: 'Get a fresh invoice' });
    await again.waitFor({ timeout: 20_000 });
    // A concurrent change answered 409 once (as a retried request under a race would be).
    let refusedOnce = false;
    await page.route('**/public/subscribe', async (route) => {
      if (refusedOnce || route.request().method() !== 'POST') return route.continue();
      refusedOnce = true;
      await route.fulfill({
        status: 409,
        contentType: 'application/json',
        body: JSON.stringify({ detail: 'The subscription changed meanwhile, please retry' }),
      });
    });
    await again.click();
    await expect.poll(() => page.locator('#payment-status').textContent()).toContain('The subscription changed meanwhile, please retry');
    expect(await again.isVisible()).toBe(true);
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('fresh-invoice');
    expect(await page.getByRole('heading', { name: 'This checkout can no longer be paid here' }).count()).toBe(0);
    const fresh = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await again.click();
    expect((await fresh).status()).toBe(201);
    await page.locator('#pay').waitFor();
    await page.unroute('**/public/subscribe');
    await page.close();
  });

  it("Lightning, Back, then on-chain with another e-mail and the same Telegram: the earlier link is not carried (another person's portal)", async () => {
    const p = await plan({ name: 'Same chat', amount_sats: 5000, allow_onchain: true });
    const smtp = await startSmtpServer('samechat', 'samechat-pass');
    const put = await admin.put(`/plans/${p.id}/notification-settings`, {
      inherit: false,
      channels: { email: { smtp_url: smtp.url }, messenger: { bot_token: BOT_TOKEN } },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    await until(
      async () => (await anon.get(`/public/plan/${p.id}`)).body,
      (b: any) => b.messenger_bot !== undefined,
    );
    // The second address is a subscriber already (of another plan): its checkout is answered without a link.
    const known = 'known-elsewhere@example.com';
    const other = await plan({ name: 'Elsewhere', amount_sats: 1000 });
    const before = await anon.post('/public/subscribe', { plan_id: other.id, payment_method: 'lightning', email: known });
    expect(before.status, JSON.stringify(before.body)).toBe(201);
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByLabel('Telegram username').fill('@same_chat');
    const first = await checkout(page, 'Lightning', 'first-person@example.com');
    expect(first.manage_url).toMatch(/token=/);
    await page.locator('#pay').waitFor();
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    await page.getByLabel('Telegram username').fill('@same_chat');
    const second = await checkout(page, 'On-chain bitcoin', known);
    expect(second.manage_url ?? null).toBeNull();
    await page.locator('#pay').waitFor();
    // The Telegram given with a known address was not stored: said beside the payment (found from outside:
    // dropped in silence, the seller's messages still going only to the e-mail).
    expect(second.contacts_unchanged).toBe(true);
    expect(await page.locator('#contacts-note').textContent()).toBe(
      "This e-mail address is known here already: the contact details stored with it are kept, and the others you gave were not added. You can change them in your subscription portal (its link was shown when you first subscribed, and is in the seller's messages).",
    );
    await pay(second.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    // The first person's portal is not offered to whoever typed the other address.
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).count()).toBe(0);
    expect(await page.content()).not.toContain(new URL(first.manage_url!).searchParams.get('token')!);
    await page.locator('#link-elsewhere').waitFor();
    expect(problems).toEqual([]);
    await page.close();
    await smtp.stop();
  });

  it('the checkout page names the seller: the notification settings name, else the wallet name (found from outside: never named)', async () => {
    const p = await plan({ name: 'Gold', amount_sats: 2100 });
    // Without a name of the owner's choosing, the wallet's own, as its messages are signed.
    expect((await anon.get(`/public/plan/${p.id}`)).body.merchant_name).toBe('test wallet 0');
    const put = await admin.put(`/plans/${p.id}/notification-settings`, { inherit: false, channels: {}, merchant_name: 'Satoshi Shop' });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect((await anon.get(`/public/plan/${p.id}`)).body.merchant_name).toBe('Satoshi Shop');
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.locator('#seller').waitFor();
    expect(await page.locator('header.plan > *').allTextContents()).toEqual(['Subscribe to', 'Gold', 'by Satoshi Shop', '2,100 sats per month']);
    expect(await page.title()).toBe('Subscribe to Gold by Satoshi Shop');
    await check(page, problems, 'checkout-seller');
    const c = await checkout(page, 'Lightning', 'seller@example.com');
    await page.locator('#pay').waitFor();
    expect(await page.locator('#seller').textContent()).toBe('by Satoshi Shop');
    // The portal names the seller too, on the card and on the receipt (found from outside: never named).
    await pay(c.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    const token = new URL(c.manage_url!).searchParams.get('token')!;
    const listed = (await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': token } })).body.items;
    expect(listed.map((x: { merchant_name?: string }) => x.merchant_name)).toEqual(['Satoshi Shop']);
    await page.goto(c.manage_url!);
    const card = page.locator(`#sub-${c.subscription_id}`);
    await expect.poll(() => card.locator('.seller').textContent()).toBe('From Satoshi Shop');
    await page.locator('details.receipt summary').click();
    const receipt = page.locator('details.receipt[open] dl');
    expect(await receipt.locator('dt').allTextContents()).toContain('Seller');
    expect(await receipt.locator('dt:text-is("Seller") + dd').textContent()).toBe('Satoshi Shop');
    await page.close();
  });

  it('a checkout replaced from another tab: no fresh-invoice button that can only be refused; titles name the step (found from outside: a loop)', async () => {
    const p = await plan({ name: 'Two rails', amount_sats: 4000, allow_onchain: true });
    const email = 'two-rails@example.com';
    const [one, two] = [await openPage(phone), await openPage(phone)];
    await one.page.goto(p.checkout_url);
    await expect.poll(() => one.page.title()).toBe('Subscribe to Two rails by test wallet 0');
    await checkout(one.page, 'Lightning', email);
    await one.page.locator('#pay').waitFor();
    expect(await one.page.title()).toBe('Pay for Two rails by test wallet 0');
    await two.page.goto(p.checkout_url);
    await checkout(two.page, 'On-chain bitcoin', email);
    // The first tab sees its invoice withdrawn; a fresh one cannot be had for this contact.
    const again = one.page.locator('#fresh-invoice');
    await again.waitFor({ timeout: 15_000 });
    const refused = one.page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await again.focus();
    await one.page.keyboard.press('Enter');
    expect((await refused).status()).toBe(409);
    await expect.poll(() => one.page.locator('#pay-heading').textContent()).toBe('This checkout can no longer be paid here');
    expect(await one.page.locator('#fresh-invoice').count()).toBe(0);
    expect(await one.page.locator('#payment-status').textContent()).toContain('pay where the newer checkout was started');
    expect(await one.page.evaluate(() => document.activeElement?.id)).toBe('pay-heading');
    expect([...one.problems, ...two.problems]).toEqual([]);
    await one.page.close();
    await two.page.close();
  });

  it('the button keeps the focus while its request runs, and a second press sends nothing (found from outside: focus on <body>)', async () => {
    const p = await plan({ name: 'Slow press', amount_sats: 2100 });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    // No channel is set up here: no reminder is offered that nobody could send.
    expect(await page.getByLabel('Remind me before each renewal').count()).toBe(0);
    let sent = 0;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    await page.route('**/public/subscribe', async (route) => {
      sent++;
      await held;
      await route.continue();
    });
    await page.getByRole('radio', { name: 'Lightning' }).check();
    await page.getByLabel('E-mail').fill('slow-press@example.com');
    await page.getByRole('button', { name: 'Continue to payment' }).focus();
    await page.keyboard.press('Enter');
    await expect.poll(() => sent).toBe(1);
    expect(await page.evaluate(() => [document.activeElement?.id, document.activeElement?.getAttribute('aria-disabled')])).toEqual(['submit', 'true']);
    await page.keyboard.press('Enter');
    await page.keyboard.press('Space');
    // Enter in a field submits the form by its default button: busy, nothing is sent either.
    await page.getByLabel('E-mail').press('Enter');
    await page.waitForTimeout(300);
    expect(sent).toBe(1);
    release();
    await page.locator('#pay').waitFor();
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a reload, Back and a second try keep the payment and the portal link (found from outside: both lost)', async () => {
    const p = await plan({ name: 'Kept', amount_sats: 4321 });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    // No channel is set up: the e-mail field does not promise messages.
    expect(await page.locator('#contact-email-hint').textContent()).toBe(
      'So the seller can reach you. Keep the link shown once you have subscribed: it manages your subscription.',
    );
    const c = await checkout(page, 'Lightning', 'kept@example.com');
    await page.locator('#pay').waitFor();
    expect(new URL(page.url()).searchParams.get('payment')).toBe(c.payment_id);
    await page.reload();
    await page.locator('#pay').waitFor();
    expect(await page.getByRole('textbox', { name: 'Invoice' }).inputValue()).toBe(c.payment_request);
    // Text at twice the size (a phone's setting): the invoice and its button wrap, nothing leaves the screen.
    await page.evaluate(() => {
      document.documentElement.style.fontSize = '200%';
    });
    expect(await overflowsHorizontally(page)).toBe(false);
    await page.evaluate(() => {
      document.documentElement.style.fontSize = '';
    });
    await check(page, problems, 'checkout-reloaded');
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    await page.goForward();
    await page.locator('#pay').waitFor();
    await pay(c.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(c.manage_url);
    // Reloaded while its status is slow to answer (held here), the paid checkout shows as paid, not as an
    // invoice headed "Pay 4,321 sats for Kept" (found from outside).
    await page.route('**/public/payment/*/status', () => {});
    await page.reload();
    await page.locator('#done').waitFor();
    expect(await page.locator('#pay').count()).toBe(0);
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(c.manage_url);
    await page.unroute('**/public/payment/*/status');

    // Back to the form in the same tab, and someone else subscribes there, a contact the service already
    // knows (answered without a link): they never see the first person's link (found from outside).
    const known = await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'known-kept@example.com' });
    expect(known.status).toBe(201);
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    // The focus is on the content again, not lost on the page's body.
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('main');
    // Left by Back, the result is forgotten with its link: Forward shows the payment paid, without it
    // (found in review: the next person at this tab could press Forward to the previous one's portal).
    await page.goForward();
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).count()).toBe(0);
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    const next = await checkout(page, 'Lightning', 'known-kept@example.com');
    expect(next.manage_url ?? null).toBeNull();
    await page.locator('#pay').waitFor();
    await pay(next.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).count()).toBe(0);
    expect(await page.locator('#done').textContent()).not.toContain(c.manage_url!);
    // This is the page where they started: it does not send them to it (found from outside).
    expect(await page.locator('#link-elsewhere').textContent()).toBe(
      'The link to manage your subscriptions was shown when you first subscribed; the seller can send it to you again.',
    );
    // The same contact again in this tab, whose checkout it saw paid: said to be paid, and shown so at
    // once (found from outside: "an open checkout", then "Waiting for your payment…" for it).
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    await page.getByLabel('E-mail').fill('known-kept@example.com');
    const paidAgain = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    expect((await paidAgain).status()).toBe(409);
    await expect.poll(() => page.locator('#form-error').textContent()).toBe('You already subscribed to this plan in this tab: Show it');
    const saidFirst = await page.evaluate(() => {
      document.getElementById('show-open-checkout')!.click();
      return document.getElementById('payment-status')?.textContent ?? null;
    });
    expect(saidFirst).toBeNull();
    await page.locator('#done').waitFor();
    expect(await page.locator('#done-message').textContent()).toBe('Payment received: your subscription to Kept is active.');

    // The same contact once more, in another tab: already subscribed, told where its link is, never given
    // it for an address typed here.
    const again = await openPage(phone);
    await again.page.goto(p.checkout_url);
    await again.page.getByLabel('E-mail').fill('kept@example.com');
    const refused = again.page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await again.page.getByRole('button', { name: 'Continue to payment' }).click();
    expect((await refused).status()).toBe(409);
    const error = again.page.locator('#form-error');
    await expect.poll(() => error.textContent()).toBe(NEUTRAL_HELP);
    expect(await error.getByRole('link').count()).toBe(0);
    expect(again.problems).toEqual([]);
    // A link naming this payment under another plan is not taken for that plan's subscription.
    const other = await plan({ name: 'Another plan', amount_sats: 999 });
    await again.page.goto(`${other.checkout_url}?payment=${c.payment_id}`);
    await again.page.getByText('This payment is not for this plan.', { exact: false }).waitFor();
    expect(await again.page.locator('#done').count()).toBe(0);
    await again.page.close();
    await page.close();
  });

  it('without JavaScript each page says what it needs instead of loading for ever', async () => {
    const p = await plan({ name: 'No script', amount_sats: 1000 });
    const noJs = await browser.newContext({ viewport: PHONE, javaScriptEnabled: false });
    const page = await noJs.newPage();
    const trial = await plan({ name: 'No script trial', amount_sats: 1000, trial_days: 3 });
    const sub = await anon.post('/public/subscribe', { plan_id: trial.id, payment_method: 'lightning', email: 'nojs@example.com' });
    for (const [url, says] of [
      [p.checkout_url, 'This checkout needs JavaScript'],
      [sub.body.manage_url, 'This page needs JavaScript to show your subscriptions'],
      [`${stack.api}/docs`, 'This reference needs JavaScript'],
    ] as const) {
      await page.goto(url);
      expect(await page.locator('#main').textContent(), url).toContain(says);
      expect(await page.locator('#main').getAttribute('aria-busy'), url).toBeNull();
      // No "Loading…" that never ends beside it.
      expect(
        await page
          .getByText(/^Loading/)
          .filter({ visible: true })
          .count(),
        url,
      ).toBe(0);
    }
    expect(await page.getByRole('link', { name: 'openapi.json' }).getAttribute('href')).toBe('/subscriptions_manager/api/v1/openapi.json');
    await noJs.close();
  });

  it('NWC: a wallet that cannot pay leaves the way to the subscription, payable another way (found from outside: none)', async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    wallet.setBehaviour({ error: 'INSUFFICIENT_BALANCE', message: 'Not enough money' });
    const p = await plan({ name: 'Broke', amount_sats: 1500, allow_nwc: true, allow_lightning: true });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('broke-page@example.com');
    await page.getByLabel('Wallet connection string').fill(wallet.connectionString());
    const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe/nwc'));
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    const body = await (await answer).json();
    expect(body.status).toBe('pending');
    const link = page.locator('#form-error').getByRole('link', { name: 'the page of your subscription' });
    await link.waitFor();
    expect(await link.getAttribute('href')).toBe(body.manage_url);
    await link.click();
    // There the first payment is open, by invoice.
    await page.getByRole('heading', { name: 'Your subscriptions' }).waitFor();
    await expect.poll(() => page.getByRole('textbox', { name: 'Invoice' }).count(), { timeout: 20_000 }).toBe(1);
    // Another wallet connected there is asked to pay the first payment at once (found from outside: it was
    // not, and the subscriber had to pay by hand); one that cannot says so, the invoice still there.
    const connect = async (w: NwcWallet) => {
      await page.locator('#connect-form').getByLabel('Wallet connection string').fill(w.connectionString());
      await page.locator('#connect-form').getByRole('button', { name: 'Connect wallet' }).click();
    };
    // A send that got no answer (the connection lost) is sent again as the same request, with the same
    // Idempotency-Key (review finding: a new one, which could ask the wallet again); a changed form is a new one.
    const keys: string[] = [];
    await page.route('**/public/manage/wallets', (route) => {
      if (route.request().method() !== 'POST') return route.fallback();
      keys.push(route.request().headers()['idempotency-key'] ?? '');
      return keys.length === 1 ? route.abort() : route.fallback();
    });
    await connect(wallet);
    await expect.poll(() => page.locator('#connect-status').textContent()).toBe('Could not reach the server. Check your connection and try again.');
    await page.locator('#connect-form').getByRole('button', { name: 'Connect wallet' }).click();
    await expect
      .poll(() => page.locator('#notice').textContent(), { timeout: 20_000 })
      .toMatch(
        new RegExp(
          `^Wallet ${wallet.pubkey.slice(0, 8)}… connected: it pays the renewals of Broke \\(1,500 sats per month\\) from now on\\. Your wallet did not pay the first payment: .+\\. Pay it from the invoice on the subscription, or connect another wallet\\.$`,
        ),
      );
    expect(await page.getByRole('textbox', { name: 'Invoice' }).count()).toBe(1);
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
    const good = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(good);
    // A wallet that takes its time: the status says it is paying, and the request is one that may be sent
    // again as a retry (found in review: "did not answer in time" after 60 s, while the route waits 75 s).
    good.setBehaviour({ pay: true, delayMs: 1500 });
    const sent = page.waitForRequest((r) => r.url().endsWith('/public/manage/wallets') && r.method() === 'POST');
    await connect(good);
    expect((await sent).headers()['idempotency-key']).toMatch(/^[0-9a-f]{32}$/);
    expect(keys[2]).not.toBe(keys[0]);
    await expect.poll(() => page.locator('#connect-status').textContent()).toBe('Your wallet is paying the first payment…');
    await expect
      .poll(() => page.locator('#notice').textContent(), { timeout: 20_000 })
      .toBe(
        `Wallet ${good.pubkey.slice(0, 8)}… connected: it pays the renewals of Broke (1,500 sats per month) from now on. Your wallet paid the first payment of 1,500 sats: the subscription is active.`,
      );
    expect(good.requests.filter((r) => r.method === 'pay_invoice')).toHaveLength(1);
    // Drawn while billing applies the payment, the card does not say it ran out (found from outside: it did,
    // with a fresh invoice to pay twice), and follows it: active, nothing left to pay.
    expect(await page.getByText(/ran out before it was paid/).count()).toBe(0);
    await expect.poll(() => page.getByRole('textbox', { name: 'Invoice' }).count(), { timeout: 20_000 }).toBe(0);
    await expect.poll(() => page.locator(`#sub-${body.subscription_id} .status-active`).count(), { timeout: 20_000 }).toBe(1);
    expect((await stack.db.query('SELECT status FROM billing.subscriptions WHERE id = $1', [body.subscription_id])).rows).toEqual([{ status: 'active' }]);
    // The news of the payment follows the connect's notice, not in its place (found from outside: "connected"
    // was replaced a second later).
    expect(await page.locator('#notice').textContent()).toMatch(
      new RegExp(
        `^Wallet ${good.pubkey.slice(0, 8)}… connected: it pays the renewals of Broke .*Your wallet paid the first payment of 1,500 sats: the subscription is active\\.( Payment received for Broke\\. Status: Active\\.)?$`,
      ),
    );
    // The one send the test cut off is the only problem.
    expect(problems).toEqual(['Failed to load resource: net::ERR_FAILED']);
    await page.close();
  });

  /** A wallet that cannot pay and one that pays, on the file's relay. */
  async function brokeAndGoodWallets() {
    const broke = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    const good = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(broke, good);
    broke.setBehaviour({ error: 'INSUFFICIENT_BALANCE', message: 'Not enough money' });
    return { broke, good };
  }

  /** Sends the NWC checkout form shown on `page` with `wallet`'s connection string; answers the API's answer. */
  async function submitNwc(page: Page, wallet: NwcWallet) {
    await page.getByLabel('Wallet connection string').fill(wallet.connectionString());
    const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe/nwc') && r.request().method() === 'POST', { timeout: 60_000 });
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    return (await answer).json();
  }

  it('NWC: a wallet that cannot pay, then one that pays, in the same tab: the link this tab was given is shown (found from outside)', async () => {
    const { broke, good } = await brokeAndGoodWallets();
    const p = await plan({ name: 'Second wallet', amount_sats: 1700, allow_nwc: true });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('second-wallet@example.com');
    const first = await submitNwc(page, broke);
    expect(first).toMatchObject({ status: 'pending', error_code: 'INSUFFICIENT_BALANCE' });
    expect(first.manage_url).toMatch(/token=/);
    await page.locator('#form-error').getByRole('link', { name: 'the page of your subscription' }).waitFor();
    // The same contact again: the service answers without the link (anyone may type an address).
    const second = await submitNwc(page, good);
    expect(second).toMatchObject({ status: 'active', subscription_id: first.subscription_id });
    expect(second.manage_url ?? null).toBeNull();
    await page.locator('#done').waitFor();
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(first.manage_url);
    await page.reload();
    await page.locator('#done').waitFor();
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(first.manage_url);
    expect(problems).toEqual([]);
    await page.close();
    // No renewals of it in the later tests' clock moves.
    expect((await admin.post(`/subscriptions/${first.subscription_id}/cancel`, { immediate: true })).status).toBe(200);
  });

  /**
   * The checkout page of a new NWC and Lightning plan, back on its form after a Lightning checkout (of
   * `email`): Forward then shows that payment, an entry of the page's own to leave the form by.
   */
  async function formAfterALightningCheckout(name: string, amount_sats: number, email: string) {
    const p = await plan({ name, amount_sats, allow_nwc: true, allow_lightning: true });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await checkout(page, 'Lightning', email);
    await page.locator('#pay').waitFor();
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    return { page, problems };
  }

  it("NWC: a refusal's link is not shown again after Back or Forward (the next person at the tab) (review finding)", async () => {
    const { broke, good } = await brokeAndGoodWallets();
    const { page, problems } = await formAfterALightningCheckout('Next at the tab', 1750, 'next-at-tab-ln@example.com');
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('next-at-tab@example.com');
    const first = await submitNwc(page, broke);
    await page.locator('#form-error').getByRole('link', { name: 'the page of your subscription' }).waitFor();
    // The person leaves by Forward, the next one comes Back and sends the same address with a wallet that pays.
    await page.goForward();
    await page.locator('#pay').waitFor();
    await page.goBack();
    await page.locator('#checkout-form').waitFor();
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('next-at-tab@example.com');
    const second = await submitNwc(page, good);
    expect(second).toMatchObject({ status: 'active', subscription_id: first.subscription_id });
    await page.locator('#done').waitFor();
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).count()).toBe(0);
    expect(await page.locator('#link-elsewhere').count()).toBe(1);
    expect(problems).toEqual([]);
    await page.close();
    expect((await admin.post(`/subscriptions/${first.subscription_id}/cancel`, { immediate: true })).status).toBe(200);
  });

  it("NWC: a wallet's refusal that comes after Back or Forward is shown on the form again, with its one-time link (found in review)", async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    const { page, problems } = await formAfterALightningCheckout('Broke later', 1600, 'broke-later-ln@example.com');
    wallet.setBehaviour({ error: 'INSUFFICIENT_BALANCE', message: 'Not enough money', delayMs: 3000 });
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('broke-later@example.com');
    await page.getByLabel('Wallet connection string').fill(wallet.connectionString());
    const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe/nwc') && r.request().method() === 'POST', { timeout: 60_000 });
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    await expect.poll(() => wallet.requests.filter((r) => r.method === 'pay_invoice').length, { timeout: 20_000 }).toBe(1);
    await page.goForward();
    await page.locator('#pay').waitFor();
    const body = await (await answer).json();
    expect(body).toMatchObject({ status: 'pending', error_code: 'INSUFFICIENT_BALANCE' });
    const link = page.locator('#form-error').getByRole('link', { name: 'the page of your subscription' });
    await link.waitFor();
    expect(await link.getAttribute('href')).toBe(body.manage_url);
    expect(new URL(page.url()).search).toBe('');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('nwc');
    expect(await page.getByLabel('E-mail').inputValue()).toBe('broke-later@example.com');
    expect(problems).toEqual([]);
    await page.close();
    wallet.setBehaviour({ pay: true });
  });

  it('NWC: a checkout that gets no answer once the wallet was asked to pay says the wallet may have paid, not only to try again', async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    wallet.setBehaviour({ pay: true, noAnswer: true });
    const p = await plan({ name: 'Unheard', amount_sats: 1500, allow_nwc: true });
    // A context of its own: its clock is the test's to move.
    const ctx = await browser.newContext({ viewport: PHONE, isMobile: true, hasTouch: true });
    await ctx.clock.install();
    const { page } = await openPage(ctx);
    await page.goto(p.checkout_url);
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('unheard@example.com');
    await page.getByLabel('Wallet connection string').fill(wallet.connectionString());
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    await expect.poll(() => wallet.requests.filter((r) => r.method === 'pay_invoice').length, { timeout: 20_000 }).toBe(1);
    // The gateway hangs with the request in hand: the page's own limit ends the wait.
    const gateway = stack.services.gateway.child;
    gateway.kill('SIGSTOP');
    try {
      await page.clock.fastForward(91_000);
      await expect
        .poll(() => page.locator('#form-error').textContent(), { timeout: 10_000 })
        .toBe('We did not hear back in time, and your wallet may have paid already. Check your wallet and your messages before you try again.');
    } finally {
      gateway.kill('SIGCONT');
    }
    await ctx.close();
  });

  it('NWC: a wallet that paid while billing is slow to apply it: the page says subscribed, in a moment (review finding: shown as a failure)', async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    const billing = stack.services.billing.child;
    // Paid, and billing stopped before it hears of it: the answer cannot wait for the activation. Once:
    // a later renewal charge of this wallet (the clock moves in later tests) must not stop it again.
    let stopped = false;
    wallet.setBehaviour({
      pay: true,
      afterPay: async () => {
        if (!stopped) billing.kill('SIGSTOP');
        stopped = true;
      },
    });
    const p = await plan({ name: 'Slow apply', amount_sats: 1500, allow_nwc: true });
    const { page, problems } = await openPage(phone);
    let answered: { status: string; message: string; error_code?: string | null; subscription_id: string };
    try {
      await page.goto(p.checkout_url);
      await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
      await page.getByLabel('E-mail').fill('slow-apply@example.com');
      await page.getByLabel('Wallet connection string').fill(wallet.connectionString());
      const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe/nwc') && r.request().method() === 'POST', { timeout: 60_000 });
      await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
      answered = await (await answer).json();
      expect(answered).toMatchObject({
        status: 'pending',
        message: 'Your wallet paid 1,500 sats: your subscription to Slow apply becomes active in a moment.',
      });
      expect(answered.error_code ?? null).toBeNull();
      await page.locator('#done').waitFor({ timeout: 10_000 });
      expect(await page.locator('#done').textContent()).toContain('becomes active in a moment');
      expect(await page.getByText('You can try again with another wallet').count()).toBe(0);
    } finally {
      billing.kill('SIGCONT');
    }
    await until(
      async () => (await admin.get(`/subscriptions/${answered!.subscription_id}`)).body,
      (b) => b.status === 'active',
    );
    expect((await admin.get(`/subscriptions/${answered!.subscription_id}`)).body.status).toBe('active');
    expect(problems).toEqual([]);
    await page.close();
    // No renewals of it in the later tests' clock moves.
    expect((await admin.post(`/subscriptions/${answered!.subscription_id}/cancel`, { immediate: true })).status).toBe(200);
    wallet.setBehaviour({ pay: true });
  });

  it('NWC: a checkout cancelled by the owner while the wallet paid is not shown as subscribed (found in review)', async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    const p = await plan({ name: 'Night radio', amount_sats: 1200, allow_nwc: true });
    let cancelled = false;
    wallet.setBehaviour({
      pay: true,
      // Paid; before the answer reaches the service the owner cancels the checkout.
      afterPay: async () => {
        if (cancelled) return;
        cancelled = true;
        const { rows } = await stack.db.query(`SELECT id FROM billing.subscriptions WHERE plan_id = $1`, [p.id]);
        expect((await admin.post(`/subscriptions/${rows[0].id}/cancel`, { immediate: true })).status).toBe(200);
      },
    });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    await page.getByRole('radio', { name: /Nostr Wallet Connect/ }).check();
    await page.getByLabel('E-mail').fill('cancelled-meanwhile@example.com');
    await page.getByLabel('Wallet connection string').fill(wallet.connectionString());
    const answer = page.waitForResponse((r) => r.url().endsWith('/public/subscribe/nwc') && r.request().method() === 'POST', { timeout: 60_000 });
    await page.getByRole('button', { name: 'Subscribe and let my wallet pay' }).click();
    const answered = await (await answer).json();
    expect(answered).toMatchObject({
      status: 'pending',
      message: 'Your wallet paid 1,200 sats, but your subscription to Night radio was cancelled meanwhile: please ask the seller for a refund.',
    });
    expect(answered.error_code ?? null).toBeNull();
    await page.locator('#done').waitFor({ timeout: 10_000 });
    expect(await page.locator('#done-heading').textContent()).toBe('Your wallet has paid');
    expect(await page.getByText('You are subscribed').count()).toBe(0);
    expect(await page.locator('#done-message').textContent()).toContain('please ask the seller for a refund');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('done-heading');
    // A reload shows the same.
    await page.reload();
    await page.locator('#done').waitFor();
    expect(await page.locator('#done-heading').textContent()).toBe('Your wallet has paid');
    expect((await admin.get(`/subscriptions/${answered.subscription_id}`)).body.status).toBe('cancelled');
    expect(problems).toEqual([]);
    await page.close();
    wallet.setBehaviour({ pay: true });
  });

  it('the portal in two tabs: a cancel in one, then in the other, shows what it is now (found from outside: a contradiction)', async () => {
    const p = await planWithMessages({ name: 'Two tabs', amount_sats: 1000, trial_days: 5 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'tabs@example.com' })).body;
    const [one, two] = [await openPage(phone), await openPage(phone)];
    for (const t of [one, two]) {
      await t.page.goto(sub.manage_url);
      await t.page.locator(`#sub-${sub.subscription_id}`).waitFor();
    }
    const cancelThere = async (page: Page, id: string) => {
      await page.locator(`#sub-${id}`).getByRole('button', { name: 'Cancel subscription' }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
    };
    const cancelIn = (page: Page) => cancelThere(page, sub.subscription_id);
    await cancelIn(one.page);
    await expect.poll(() => one.page.locator(`#sub-${sub.subscription_id} .status-cancelled`).count()).toBe(1);
    await cancelIn(two.page);
    await expect.poll(() => two.page.locator('#notice').textContent()).toBe('Two tabs: This subscription is already cancelled.');
    const card = two.page.locator(`#sub-${sub.subscription_id}`);
    expect(await card.locator('.status-cancelled').textContent()).toBe('Cancelled');
    expect(await card.getByRole('button', { name: 'Cancel subscription' }).count()).toBe(0);
    expect(two.problems).toEqual([]);
    // A notice switch refused the same way (ended in another tab) redraws the card too.
    const other = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'tabs2@example.com' })).body;
    for (const t of [one, two]) {
      await t.page.goto(other.manage_url);
      await t.page.locator(`#sub-${other.subscription_id}`).waitFor();
    }
    await cancelThere(one.page, other.subscription_id);
    await expect.poll(() => one.page.locator(`#sub-${other.subscription_id} .status-cancelled`).count()).toBe(1);
    const card2 = two.page.locator(`#sub-${other.subscription_id}`);
    // A click, not uncheck(): the refused switch is put back at once, which uncheck() takes for a failed click.
    await card2.getByRole('checkbox', { name: /Payment reminders/ }).click();
    await expect
      .poll(() => two.page.locator('#notice').textContent())
      .toBe('Reminders for Two tabs could not be changed: This subscription has ended (cancelled): it gets no more reminders or confirmations.');
    expect(await two.page.evaluate(() => document.activeElement?.id)).toBe('notice');
    await expect.poll(() => card2.locator('.status-cancelled').count()).toBe(1);
    expect(await card2.getByRole('button', { name: 'Cancel subscription' }).count()).toBe(0);
    await one.page.close();
    await two.page.close();
  });

  it('an invoice that expires is replaced by a fresh one on the page', async () => {
    const p = await plan({ name: 'Fresh', amount_sats: 777 });
    const { page, problems } = await openPage(phone);
    await page.goto(p.checkout_url);
    const first = await checkout(page, 'Lightning', 'fresh@example.com');
    await page.locator('#pay').waitFor();
    expect((await admin.post('/dev/clock', { advance_seconds: 3700 })).status).toBe(200);
    await until(
      () => anon.get(`/public/payment/${first.payment_id}/status`),
      (r) => r.body.status === 'expired',
    );
    const fresh = page.getByRole('button', { name: 'Get a fresh invoice' });
    await fresh.waitFor({ timeout: 20_000 });
    expect(await page.locator('#payment-status').textContent()).toContain('This payment request expired before it was paid.');
    // The focused heading no longer asks to pay it (found from outside).
    expect(await page.locator('#pay-heading').textContent()).toBe('Payment request expired');
    await check(page, problems, 'checkout-expired');
    const again = page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    await fresh.click();
    const second = await (await again).json();
    expect(second.subscription_id).toBe(first.subscription_id);
    expect(second.payment_id).not.toBe(first.payment_id);
    await expect.poll(() => page.getByRole('textbox', { name: 'Invoice' }).inputValue()).toBe(second.payment_request);
    await pay(second.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    // The portal link of the first answer is kept.
    expect(await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href')).toBe(first.manage_url);
    // The invoice that ran out was not replaced by the one paid after it: it says so nowhere (found in
    // review: named as paid for by the later one, and "Not due" in the portal).
    await until(
      async () => (await admin.get(`/payments/${second.payment_id}`)).body,
      (b) => b.period_start !== undefined,
    );
    expect((await anon.get(`/public/payment/${first.payment_id}/status`)).body.replaced_by).toBeUndefined();
    await page.goto(first.manage_url!);
    await page.locator('.payment-row', { hasText: 'Expired, not paid' }).waitFor();
    expect(await page.locator('.payment-row', { hasText: 'Not due' }).count()).toBe(0);

    // Reached by Telegram only: without an e-mail address the fresh invoice belongs to a new checkout,
    // and the portal link shown at the end is that one's, which holds the paid subscription.
    const chatOnly = await plan({ name: 'Fresh chat', amount_sats: 888 });
    const put = await admin.put(`/plans/${chatOnly.id}/notification-settings`, { inherit: false, channels: { messenger: { bot_token: BOT_TOKEN } } });
    expect(put.status).toBe(200);
    await page.goto(chatOnly.checkout_url);
    await page.getByLabel('Telegram username').fill('5551');
    const answered = () => page.waitForResponse((r) => r.url().endsWith('/public/subscribe') && r.request().method() === 'POST');
    let next = answered();
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    const chatFirst = await (await next).json();
    await page.locator('#pay').waitFor();
    expect((await admin.post('/dev/clock', { advance_seconds: 3700 })).status).toBe(200);
    next = answered();
    await page.getByRole('button', { name: 'Get a fresh invoice' }).click({ timeout: 20_000 });
    const chatSecond = await (await next).json();
    await pay(chatSecond.payment_id);
    await page.locator('#done').waitFor({ timeout: 20_000 });
    const link = await page.getByRole('link', { name: 'Manage your subscription' }).getAttribute('href');
    expect(link).toBe(chatSecond.manage_url ?? chatFirst.manage_url);
    await page.goto(link!);
    const card = page.locator(`#sub-${chatSecond.subscription_id}`);
    await expect.poll(() => card.locator('.status-active').textContent(), { timeout: 20_000 }).toBe('Active');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('the portal offers a fresh invoice for a checkout whose invoice ran out; paid, the card turns active (found from outside: nothing to pay with)', async () => {
    const p = await plan({ name: 'Ran out', amount_sats: 654 });
    const c = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'ranout@example.com' })).body;
    const headers = { 'X-Subscriber-Token': new URL(c.manage_url).searchParams.get('token')! };
    const invoice = (id: string, h = headers) => anon.post(`/public/manage/subscription/${id}/invoice`, {}, { headers: h });
    // While the first invoice is open, it is the answer.
    const open = await invoice(c.subscription_id);
    expect(open.status, JSON.stringify(open.body)).toBe(200);
    expect(open.body).toMatchObject({ id: c.payment_id, status: 'pending', payment_request: c.payment_request, plan_name: 'Ran out' });
    const runOut = async (id: string) => {
      expect((await admin.post('/dev/clock', { advance_seconds: 3700 })).status).toBe(200);
      await until(
        () => anon.get(`/public/payment/${id}/status`),
        (r) => r.body.status === 'expired',
      );
    };
    // Asked at once from several places (two tabs, the checkout page): one fresh invoice, not one each.
    await runOut(c.payment_id);
    const together = await Promise.all([1, 2, 3].map(() => invoice(c.subscription_id)));
    expect(together.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(new Set(together.map((r) => r.body.id)).size).toBe(1);
    expect(together[0]!.body.id).not.toBe(c.payment_id);
    // Asked again later while that one is open: that one (review finding: a new one every second).
    expect((await admin.post('/dev/clock', { advance_seconds: 5 })).status).toBe(200);
    expect((await invoice(c.subscription_id)).body.id).toBe(together[0]!.body.id);
    await runOut(together[0]!.body.id);
    const { page, problems } = await openPage(phone);
    await page.goto(c.manage_url);
    const card = page.locator(`#sub-${c.subscription_id}`);
    await card.getByText('The invoice for the first payment ran out before it was paid.').waitFor();
    await check(page, problems, 'portal-ran-out');
    // By keyboard: the button, then the invoice in its place, announced, focus on its heading.
    await card.getByRole('button', { name: 'Get a fresh invoice' }).focus();
    const asked = page.waitForResponse((r) => r.url().endsWith(`/subscription/${c.subscription_id}/invoice`) && r.request().method() === 'POST');
    await page.keyboard.press('Enter');
    const fresh = await (await asked).json();
    expect([c.payment_id, together[0]!.body.id]).not.toContain(fresh.id);
    expect(fresh).toMatchObject({ subscription_id: c.subscription_id, status: 'pending', amount_sats: 654 });
    await expect.poll(() => card.getByRole('textbox', { name: 'Invoice' }).inputValue()).toBe(fresh.payment_request);
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Payment due');
    // Asked again, the same open invoice (no second one to pay).
    expect((await invoice(c.subscription_id)).body.id).toBe(fresh.id);
    await pay(fresh.id);
    await expect.poll(() => card.locator('.status-active').textContent(), { timeout: 20_000 }).toBe('Active');
    expect(await card.getByRole('button', { name: 'Get a fresh invoice' }).count()).toBe(0);
    // Not waiting for a first payment any more: 409; another subscriber's subscription: 404 as an unknown one.
    const done = await invoice(c.subscription_id);
    expect(done.status).toBe(409);
    expect(done.body.detail).toBe('This subscription is not waiting for its first payment (it is active)');
    const other = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'ranout-other@example.com' })).body;
    expect((await invoice(other.subscription_id)).status).toBe(404);
    // A method the plan no longer takes gets no fresh invoice: 409 saying what to do.
    const chain = await plan({ name: 'No more chain', amount_sats: 700, allow_onchain: true });
    const onchain = (await anon.post('/public/subscribe', { plan_id: chain.id, payment_method: 'onchain', email: 'ranout-chain@example.com' })).body;
    expect((await admin.put(`/plans/${chain.id}`, { allow_onchain: false })).status).toBe(200);
    const chainHeaders = { 'X-Subscriber-Token': new URL(onchain.manage_url).searchParams.get('token')! };
    const refused = await invoice(onchain.subscription_id, chainHeaders);
    expect(refused.status).toBe(409);
    expect(refused.body.detail).toBe("This plan does not accept onchain payments: subscribe again on the plan's checkout page with another method");
    expect((await invoice(c.subscription_id, { 'X-Subscriber-Token': 'f'.repeat(64) })).status).toBe(401);
    expect(problems).toEqual([]);
    await page.close();
  });

  /**
   * A Lightning checkout of a new plan, its portal open on a phone, its card showing the payment due.
   * `before`: done on the page before it loads (a listener).
   */
  async function portalOfCheckout(name: string, amount_sats: number, email: string, before?: (page: Page) => void) {
    const p = await plan({ name, amount_sats });
    const c = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email })).body;
    const { page, problems } = await openPage(phone);
    before?.(page);
    await page.goto(c.manage_url);
    const card = page.locator(`#sub-${c.subscription_id}`);
    await card.getByRole('heading', { name: 'Payment due' }).waitFor();
    return { c, page, problems, card };
  }

  it('the portal lists its fresh invoice, and follows an invoice that ran out: paid late, said without a reload (found in review)', async () => {
    const { c, page, problems, card } = await portalOfCheckout('Late in portal', 660, 'late-portal@example.com');
    expect((await admin.post('/dev/clock', { advance_seconds: 3700 })).status).toBe(200);
    await card.getByText('The invoice for the first payment ran out before it was paid.').waitFor({ timeout: 20_000 });
    expect(await page.locator('#notice').textContent()).toBe('The payment due for Late in portal expired before it was paid. Nothing was charged.');
    // Opened after it ran out (nothing open to follow on it): the one that ran out is followed.
    const other = await openPage(phone);
    await other.page.goto(c.manage_url);
    const otherCard = other.page.locator(`#sub-${c.subscription_id}`);
    await otherCard.getByRole('button', { name: 'Get a fresh invoice' }).waitFor();
    // A fresh invoice: on the card, and in the payments list as the open one (not only after a reload).
    await card.getByRole('button', { name: 'Get a fresh invoice' }).click();
    await card.getByRole('textbox', { name: 'Invoice' }).waitFor();
    await expect.poll(() => page.locator('.payment-row .pill-pending').count()).toBe(1);
    expect(await otherCard.getByRole('button', { name: 'Get a fresh invoice' }).count()).toBe(1);
    // The invoice that ran out, paid after all (a wallet paying at the last moment): both pages say so.
    await pay(c.payment_id);
    for (const [shown, at] of [
      [page, card],
      [other.page, otherCard],
    ] as const) {
      await expect.poll(() => at.locator('.status-active').textContent(), { timeout: 30_000 }).toBe('Active');
      expect(await shown.locator('#notice').textContent()).toBe('Payment received for Late in portal. Status: Active.');
      expect(await at.getByRole('heading', { name: 'Payment due' }).count()).toBe(0);
    }
    expect(problems).toEqual([]);
    expect(other.problems).toEqual([]);
    await other.page.close();
    await page.close();
  });

  it('the portal follows one invoice that ran out per card, the newest, not every one it saw run out (review finding)', async () => {
    const asked: string[] = [];
    const { c, page, problems, card } = await portalOfCheckout('Ran out twice', 680, 'ran-out-twice@example.com', (page) =>
      page.on('request', (r) => {
        const m = /\/public\/payment\/([^/]+)\/status$/.exec(new URL(r.url()).pathname);
        if (m) asked.push(decodeURIComponent(m[1]!));
      }),
    );
    const runOut = async () => {
      expect((await admin.post('/dev/clock', { advance_seconds: 3700 })).status).toBe(200);
      await card.getByRole('button', { name: 'Get a fresh invoice' }).waitFor({ timeout: 20_000 });
    };
    await runOut();
    const fresh = page.waitForResponse((r) => r.url().endsWith(`/subscription/${c.subscription_id}/invoice`) && r.request().method() === 'POST');
    await card.getByRole('button', { name: 'Get a fresh invoice' }).click();
    const second = await (await fresh).json();
    await card.getByRole('textbox', { name: 'Invoice' }).waitFor();
    await runOut();
    // From now on only the newest one that ran out is asked about (every 10 s), the first no more.
    asked.length = 0;
    await expect.poll(() => asked.filter((id) => id === second.id).length, { timeout: 30_000 }).toBeGreaterThanOrEqual(2);
    expect(asked.filter((id) => id === c.payment_id)).toEqual([]);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('the portal says a payment is received while billing applies it, then the card turns active (found in review)', async () => {
    const { c, page, problems, card } = await portalOfCheckout('Applying', 670, 'applying-portal@example.com');
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    try {
      await pay(c.payment_id);
      // Nothing left to pay with; not said active before billing says it applied it.
      await card.getByText('Payment received. Applying it to your subscription…').waitFor({ timeout: 20_000 });
      // Said aloud once (a live region inserted with its words is often not read).
      await expect.poll(() => page.locator('#announcer').textContent()).toBe('Payment received. Applying it to your subscription…');
      expect(await card.getByRole('textbox', { name: 'Invoice' }).count()).toBe(0);
      expect(await card.locator('.status-active').count()).toBe(0);
    } finally {
      billing.kill('SIGCONT');
    }
    await expect.poll(() => card.locator('.status-active').textContent(), { timeout: 30_000 }).toBe('Active');
    expect(await page.locator('#notice').textContent()).toBe('Payment received for Applying. Status: Active.');
    // No wallet for a Lightning subscription, and no advice that ends on a 409 (found from outside: "subscribe with NWC").
    await expect
      .poll(() => page.locator('#wallets .hint').last().textContent())
      .toBe('A wallet pays automatically only for a subscription started with "Nostr Wallet Connect" on its checkout page.');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('the portal: notice switches by keyboard, saved, their state announced; a failed save says so and puts the switch back', async () => {
    const p = await planWithMessages({ name: 'Switches', amount_sats: 1500, trial_days: 14 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'switches@example.com' })).body;
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    const group = card.getByRole('group', { name: 'Messages we send you about Switches' });
    const reminders = group.getByRole('checkbox', { name: /^Payment reminders/ });
    const confirmations = group.getByRole('checkbox', { name: /^Confirmations and receipts/ });
    const status = card.locator(`#notices-${sub.subscription_id}-status`);
    await reminders.waitFor();
    expect([await reminders.isChecked(), await confirmations.isChecked()]).toEqual([true, true]);
    expect(await status.getAttribute('role')).toBe('status');

    // Space on the focused switch saves it; the live region says what it is now; the focus stays.
    await reminders.focus();
    await page.keyboard.press('Space');
    await expect.poll(() => status.textContent()).toBe('Reminders for Switches are off.');
    expect(await reminders.isChecked()).toBe(false);
    expect(await page.evaluate(() => document.activeElement?.id)).toBe(`notices-${sub.subscription_id}-receive_reminders`);
    expect((await admin.get(`/subscriptions/${sub.subscription_id}`)).body).toMatchObject({ receive_reminders: false, receive_confirmations: true });
    await page.reload();
    await reminders.waitFor();
    expect([await reminders.isChecked(), await confirmations.isChecked()]).toEqual([false, true]);

    // The save fails on the network: said in words, the switch as it was, the focus on it.
    await page.route('**/public/manage/subscription/*', (r) => r.abort());
    await confirmations.focus();
    await page.keyboard.press('Space');
    await expect.poll(() => status.textContent()).toMatch(/^Confirmations could not be changed: Could not reach the server/);
    expect(await confirmations.isChecked()).toBe(true);
    expect(await page.evaluate(() => document.activeElement?.id)).toBe(`notices-${sub.subscription_id}-receive_confirmations`);
    expect((await admin.get(`/subscriptions/${sub.subscription_id}`)).body.receive_confirmations).toBe(true);
    await page.unroute('**/public/manage/subscription/*');
    await page.keyboard.press('Space');
    await expect.poll(() => status.textContent()).toBe('Confirmations for Switches are off.');
    expect((await admin.get(`/subscriptions/${sub.subscription_id}`)).body.receive_confirmations).toBe(false);
    await check(
      page,
      problems.filter((m) => !/net::ERR_FAILED/.test(m)),
      'portal-notices',
    );
    await page.close();
  });

  it('NWC in the portal: a disconnected wallet leaves the card saying "invoice"; each wallet names its plan; the form says which has one (found from outside)', async () => {
    const wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
    nwcWallets.push(wallet);
    const alpha = await plan({ name: 'Alpha', amount_sats: 1100, allow_nwc: true });
    const beta = await plan({ name: 'Beta', amount_sats: 1200, allow_nwc: true });
    // Two subscriptions of one subscriber, both paid by the same wallet service.
    const first = await anon.post('/public/subscribe/nwc', {
      plan_id: alpha.id,
      email: 'two-wallets@example.com',
      nwc_connection_string: wallet.connectionString(),
    });
    expect(first.status).toBe(201);
    const second = await anon.post('/public/subscribe/nwc', {
      plan_id: beta.id,
      email: 'two-wallets@example.com',
      nwc_connection_string: wallet.connectionString(),
    });
    expect(second.status).toBe(201);
    const { page, problems } = await openPage(phone);
    await page.goto(first.body.manage_url);
    const wallets = page.locator('ul.wallets > li');
    await expect.poll(() => wallets.count()).toBe(2);
    const texts = await wallets.allTextContents();
    expect(texts.filter((t) => t.includes('Pays the renewals of Alpha.'))).toHaveLength(1);
    expect(texts.filter((t) => t.includes('Pays the renewals of Beta.'))).toHaveLength(1);
    const options = () => page.locator('#connect-subscription label').allTextContents();
    expect((await options()).sort()).toEqual([
      'Alpha (1,100 sats per month), replaces its connected wallet',
      'Beta (1,200 sats per month), replaces its connected wallet',
    ]);
    const paidBy = page.locator(`#sub-${first.body.subscription_id} dt:text-is("Paid by") + dd`);
    expect(await paidBy.textContent()).toBe('Your wallet, automatically (NWC)');
    // Each plan's name keeps its own direction in the sentence that names it.
    expect(await wallets.filter({ hasText: 'Alpha' }).locator('p [dir=auto]').allTextContents()).toEqual(['Alpha']);

    // 200% zoom on a phone (180 CSS px): each choice is read whole (found from outside: a select cut it),
    // and no button breaks inside its word (found from outside: "Disconn / ect").
    await page.setViewportSize({ width: 180, height: 370 });
    for (const name of ['Alpha (1,100 sats per month), replaces its connected wallet', 'Beta (1,200 sats per month), replaces its connected wallet']) {
      const choice = page.locator('#connect-form').getByText(name, { exact: true }).last();
      expect(await choice.isVisible(), name).toBe(true);
      const box = (await choice.boundingBox())!;
      expect(box.x + box.width, name).toBeLessThanOrEqual(180);
      expect(await choice.evaluate((e) => e.scrollWidth <= e.clientWidth)).toBe(true);
    }
    for (const button of await wallets.getByRole('button', { name: /^Disconnect/ }).all()) {
      const laid = await button.evaluate((b) => {
        const words = document.createRange();
        words.selectNodeContents(b.firstChild!);
        const card = b.closest('li')!.getBoundingClientRect();
        const own = b.getBoundingClientRect();
        return { lines: new Set([...words.getClientRects()].map((r) => Math.round(r.top))).size, inside: own.right <= card.right };
      });
      expect(laid).toEqual({ lines: 1, inside: true });
    }
    expect(await overflowsHorizontally(page)).toBe(false);
    await page.setViewportSize(PHONE);

    await wallets
      .filter({ hasText: 'Alpha' })
      .getByRole('button', { name: /^Disconnect wallet .* of Alpha$/ })
      .click();
    await page.getByRole('dialog').getByRole('button', { name: 'Disconnect wallet' }).click();
    await expect.poll(() => page.locator('#notice').textContent()).toBe('Wallet disconnected: it pays nothing more; any further renewal is paid by invoice.');
    await expect
      .poll(
        async () => (await stack.db.query('SELECT nwc_fallback FROM billing.subscriptions WHERE id = $1', [first.body.subscription_id])).rows[0].nwc_fallback,
      )
      .toBe(true);
    await page.reload();
    await paidBy.waitFor();
    expect(await paidBy.textContent()).toBe('Invoice (your wallet was disconnected)');
    expect(await page.locator(`#sub-${second.body.subscription_id} dt:text-is("Paid by") + dd`).textContent()).toBe('Your wallet, automatically (NWC)');
    await expect.poll(() => wallets.count()).toBe(2);
    expect(await wallets.filter({ hasText: 'Alpha' }).textContent()).toContain('· DisconnectedWas set to pay the renewals of Alpha.');
    // The one without a wallet is offered first, unmarked.
    expect(await options()).toEqual(['Alpha (1,100 sats per month)', 'Beta (1,200 sats per month), replaces its connected wallet']);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('billing hung: a notice switch and a cancel say they could not be confirmed (not refused); not made after the 503, a second press makes it (found from outside)', async () => {
    const p = await planWithMessages({ name: 'Hung', amount_sats: 1500, trial_days: 14 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'hung@example.com' })).body;
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    const reminders = card.getByRole('checkbox', { name: /^Payment reminders/ });
    const status = card.locator(`#notices-${sub.subscription_id}-status`);
    await reminders.waitFor();
    // The gateway gives up after BUS_TIMEOUT_MS (20 s in the test stack, 5 s by default).
    const billing = stack.services.billing.child;
    // One change at a time: billing answers the requests it got while frozen all at once, and a
    // cancel saved first would refuse the switch (an ended subscription has none).
    // A change the gateway answered 503 for is not made once billing goes on (withCallerDeadline; before,
    // it was made after the page had said it could not be confirmed).
    const frozen = async (change: () => Promise<void>, unchanged: Record<string, unknown>) => {
      billing.kill('SIGSTOP');
      try {
        await change();
      } finally {
        billing.kill('SIGCONT');
      }
      const after = await until(
        () => admin.get(`/subscriptions/${sub.subscription_id}`),
        (r) => r.status === 200,
        30_000,
      );
      expect(after.body).toMatchObject(unchanged);
    };
    await frozen(
      async () => {
        await reminders.click();
        await expect
          .poll(() => status.textContent(), { timeout: 30_000 })
          .toBe('Reminders for Hung: we could not confirm this change yet. Reload the page to see whether it was made.');
        // The plan's name keeps its own direction (found from outside: a Hebrew name read backwards).
        expect(await status.locator('[dir=auto]').textContent()).toBe('Hung');
        // Not put back as if refused: it shows what was asked.
        expect(await reminders.isChecked()).toBe(false);
      },
      { receive_reminders: true },
    );
    await frozen(
      async () => {
        await card.getByRole('button', { name: 'Cancel subscription to Hung', exact: true }).click();
        await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
        await expect
          .poll(() => card.locator('p.status').textContent(), { timeout: 30_000 })
          .toBe('Cancelling Hung: we could not confirm this change yet. Reload the page to see whether it was made.');
        expect(await card.locator('p.status [dir=auto]').textContent()).toBe('Hung');
      },
      { status: 'active' },
    );
    // Pressed again (not reloaded): the same request (its key), made now and answered as a cancel, not
    // "already cancelled" (found from outside).
    const again = page.waitForRequest((r) => r.url().endsWith(`/subscription/${sub.subscription_id}/cancel`) && r.method() === 'POST');
    await card.getByRole('button', { name: 'Cancel subscription to Hung', exact: true }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
    expect((await again).headers()['idempotency-key']).toMatch(/^[0-9a-f]{32}$/);
    await expect.poll(() => page.locator('#notice').textContent()).toMatch(/^Hung is cancelled\./);
    await expect.poll(() => page.locator(`#sub-${sub.subscription_id} .status-cancelled`).textContent()).toBe('Cancelled');
    expect(problems.filter((m) => !/status of 503/.test(m))).toEqual([]);
    await page.close();
  });

  it('the gateway itself hung: a change says, after a minute, that it could not be confirmed, instead of waiting for ever', async () => {
    const p = await planWithMessages({ name: 'Silent', amount_sats: 1500, trial_days: 14 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'silent@example.com' })).body;
    // A context of its own: its clock is the test's to move.
    const ctx = await browser.newContext({ viewport: PHONE, isMobile: true, hasTouch: true });
    await ctx.clock.install();
    const { page } = await openPage(ctx);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    const reminders = card.getByRole('checkbox', { name: /^Payment reminders/ });
    const status = card.locator(`#notices-${sub.subscription_id}-status`);
    await reminders.waitFor();
    const gateway = stack.services.gateway.child;
    gateway.kill('SIGSTOP');
    try {
      await reminders.click();
      await page.waitForTimeout(500);
      expect(await status.textContent()).not.toContain('could not confirm');
      await page.clock.fastForward(61_000);
      await expect
        .poll(() => status.textContent(), { timeout: 10_000 })
        .toBe('Reminders for Silent: we could not confirm this change yet. Reload the page to see whether it was made.');
    } finally {
      gateway.kill('SIGCONT');
    }
    await ctx.close();
  });

  it('payments hung: the portal still shows the subscriptions (cancel, notices) and says the payments could not be loaded (found from outside)', async () => {
    const p = await planWithMessages({ name: 'No payments', amount_sats: 1300 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'no-payments@example.com' })).body;
    const { page, problems } = await openPage(phone);
    const payments = stack.services.payments.child;
    payments.kill('SIGSTOP');
    const card = page.locator(`#sub-${sub.subscription_id}`);
    try {
      await page.goto(sub.manage_url);
      // The subscriptions are there long before the gateway gives up on the payments (BUS_TIMEOUT_MS, 20 s here).
      await card.locator('.status-pending').waitFor({ timeout: 5000 });
      expect(await page.locator('#payments').textContent()).toContain('Loading your payments…');
      await expect
        .poll(() => page.locator('#payments-error').textContent(), { timeout: 30_000 })
        .toBe('Payments could not be loaded right now. Service did not answer in time, please retry.');
      expect(await card.locator('.status-pending').textContent()).toBe('Waiting for the first payment');
      const confirmations = card.getByRole('checkbox', { name: /^Confirmations and receipts/ });
      await confirmations.click();
      await expect
        .poll(() => card.locator(`#notices-${sub.subscription_id}-status`).textContent(), { timeout: 10_000 })
        .toBe('Confirmations for No payments are off.');
      await card.getByRole('button', { name: 'Cancel subscription to No payments', exact: true }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
      await expect.poll(() => page.locator('#notice').textContent(), { timeout: 15_000 }).toBe('No payments is cancelled.');
      // The API's own subscription answer waits for its payments: the database says what was made.
      const { rows } = await stack.db.query('SELECT status, receive_confirmations FROM billing.subscriptions WHERE id = $1', [sub.subscription_id]);
      expect(rows).toEqual([{ status: 'cancelled', receive_confirmations: false }]);
      await check(
        page,
        problems.filter((m) => !/status of 503/.test(m)),
        'portal-no-payments',
      );
    } finally {
      payments.kill('SIGCONT');
    }
    await page.reload();
    await expect.poll(() => page.locator('#payments .payment-row').count(), { timeout: 30_000 }).toBe(1);
    expect(problems.filter((m) => !/status of 503/.test(m))).toEqual([]);
    await page.close();
  });

  it('billing away when the portal and a checkout are opened: each says so, then loads by itself once it is back (found from outside)', async () => {
    const p = await planWithMessages({ name: 'Back by itself', amount_sats: 1400 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'back-by-itself@example.com' })).body;
    const portal = await openPage(phone);
    const form = await openPage(phone);
    await stack.stopBilling();
    try {
      await portal.page.goto(sub.manage_url);
      await form.page.goto(p.checkout_url);
      await expect.poll(() => portal.page.getByRole('heading', { level: 1 }).textContent()).toBe('Your subscriptions could not be loaded');
      await expect.poll(() => form.page.getByRole('heading', { level: 1 }).textContent()).toBe('Checkout unavailable');
      for (const { page } of [portal, form]) {
        expect(await page.locator('#loads-again').textContent()).toBe('This page tries again by itself in a moment. Try again now');
        expect(await page.getByRole('link', { name: 'Try again now' }).getAttribute('href')).toBe(page.url());
        // The focus is on what is said, not on <body> (found from outside: the portal's was).
        expect(await page.evaluate(() => document.activeElement?.tagName)).toBe('H1');
      }
      // A try that meets the outage again leaves the view (and its alert) as it was.
      const alert = await portal.page.getByRole('alert').elementHandle();
      await portal.page.waitForTimeout(4000);
      expect(await alert!.evaluate((el) => el.isConnected)).toBe(true);
    } finally {
      await stack.restartBilling();
    }
    // No reload: each page loads again by itself, and the focus is in its content.
    await portal.page.locator(`#sub-${sub.subscription_id}`).waitFor({ timeout: 45_000 });
    expect(await portal.page.getByRole('heading', { level: 1 }).textContent()).toBe('Your subscriptions');
    // The tab's title too (found from outside: it kept "Subscriptions unavailable").
    expect(await portal.page.title()).toBe('Your subscriptions');
    await form.page.locator('#checkout-form').waitFor({ timeout: 45_000 });
    expect(await form.page.getByRole('heading', { level: 1 }).textContent()).toBe('Back by itself');
    for (const { page } of [portal, form]) expect(await page.evaluate(() => document.activeElement?.id)).toBe('main');
    // The outage's 503s are the only problems the pages met.
    for (const { page, problems } of [portal, form]) {
      expect(problems.filter((m) => !/status of 503/.test(m))).toEqual([]);
      await page.close();
    }
  });

  it('a List-Unsubscribe link opened in a browser asks first; its button turns that kind of message off', async () => {
    const smtp = await startSmtpServer('pages', 'pages-pass');
    try {
      const p = await plan({ name: RTL_NAME, amount_sats: 1500, trial_days: 14 });
      const put = await admin.put(`/plans/${p.id}/notification-settings`, {
        inherit: false,
        channels: { email: { smtp_url: smtp.url } },
        merchant_name: 'Pages Shop',
      });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'letters@example.com' })).body;
      const mail = await until(
        async () => smtp.mails.find((m) => m.to.includes('letters@example.com')),
        (m) => !!m,
      );
      const url = /^<(.+)>$/.exec(mail!.headers['list-unsubscribe'] ?? '')?.[1];
      expect(url).toMatch(new RegExp(`^${stack.gatewayUrl}/subscriptions_manager/api/v1/public/unsubscribe/`));
      const { page, problems } = await openPage(phone);
      await page.goto(url!);
      await page.getByRole('heading', { name: 'Stop confirmations and receipts?' }).waitFor();
      // It names what stops, for which plan of which merchant (review finding), the names beside "for"
      // (found from outside: after "the receipts stay in your subscription portal"), and what the portal
      // can turn back on (found from outside: it read as the cancellation notices).
      expect(await page.locator('#what').textContent()).toBe(
        `You will no longer get confirmations and receipts for ${RTL_NAME} from Pages Shop (subscription started, payment received). The receipts stay in your subscription portal. To get confirmations and receipts again, turn them back on in your subscription portal (its link is in every message about this subscription). Cancellation notices are still sent.`,
      );
      // The seller's names keep their own direction (found from outside: the "!" on the wrong side).
      expect(await page.locator('#what [dir=auto]').allTextContents()).toEqual([RTL_NAME, 'Pages Shop']);
      expect(
        await page
          .locator('#what [dir=auto]')
          .first()
          .evaluate((e) => getComputedStyle(e).direction),
      ).toBe('rtl');
      // Opening it changed nothing.
      expect((await admin.get(`/subscriptions/${sub.subscription_id}`)).body.receive_confirmations).toBe(true);
      await check(page, problems, 'unsubscribe');
      await page.getByRole('button', { name: 'Stop confirmations' }).focus();
      await page.keyboard.press('Enter');
      await page.getByRole('heading', { name: 'Done' }).waitFor();
      expect(await page.locator('#result').textContent()).toContain(`no longer get confirmations and receipts for ${RTL_NAME}`);
      expect(await page.evaluate(() => document.activeElement?.id)).toBe('main');
      expect((await admin.get(`/subscriptions/${sub.subscription_id}`)).body).toMatchObject({ receive_confirmations: false, receive_reminders: true });
      expect(problems).toEqual([]);

      // Opened again: already stopped, nothing to press.
      await page.goto(url!);
      await page.getByRole('heading', { name: 'Already stopped' }).waitFor();
      expect(await page.getByRole('button').count()).toBe(0);
      // A garbled or forged link says at once that it does not work: no button to press first (review finding).
      for (const bad of [url!.replace(/\.[^.]+$/, '.AAAA'), url!.replace('.confirmations.', '.reminders.')]) {
        await page.goto(bad);
        await page.getByRole('heading', { name: 'This link does not work' }).waitFor();
        expect(await page.getByRole('button').count(), bad).toBe(0);
      }
      await check(page, problems, 'unsubscribe-bad-link');
      await page.close();
    } finally {
      await smtp.stop();
    }
  });

  it("an ended subscription's List-Unsubscribe link does not send the person to the portal; a stop under way is said (found from outside)", async () => {
    const smtp = await startSmtpServer('pages-ended', 'pages-pass');
    try {
      const p = await plan({ name: 'Ended letters', amount_sats: 1500, trial_days: 14 });
      const put = await admin.put(`/plans/${p.id}/notification-settings`, { inherit: false, channels: { email: { smtp_url: smtp.url } } });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      const subscribe = async (email: string) => {
        const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email })).body;
        const mail = await until(
          async () => smtp.mails.find((m) => m.to.includes(email)),
          (m) => !!m,
        );
        return { sub, url: /^<(.+)>$/.exec(mail!.headers['list-unsubscribe'] ?? '')![1]! };
      };
      const ended = await subscribe('ended-letters@example.com');
      expect((await admin.post(`/subscriptions/${ended.sub.subscription_id}/cancel`, {})).status).toBe(200);
      const { page, problems } = await openPage(phone);
      // Before: "turn them back on in your subscription portal", where an ended subscription's switches are
      // refused. A payment made before may still bring a confirmation: the stop is still taken.
      await page.goto(ended.url);
      await page.getByRole('heading', { name: 'Stop confirmations and receipts?' }).waitFor();
      expect(await page.locator('#what').textContent()).toMatch(
        /^You will no longer get confirmations and receipts for Ended letters( from .+)? \(subscription started, payment received\)\. Your subscription to it has ended\.$/,
      );
      await page.getByRole('button', { name: 'Stop confirmations' }).click();
      await page.getByRole('heading', { name: 'Done' }).waitFor();
      expect(await page.locator('#result').textContent()).toBe('You will no longer get confirmations and receipts for Ended letters, which was cancelled.');
      expect((await admin.get(`/subscriptions/${ended.sub.subscription_id}`)).body.receive_confirmations).toBe(false);
      await page.goto(ended.url);
      await page.getByRole('heading', { name: 'Already stopped' }).waitFor();
      expect(await page.locator('#what').textContent()).not.toContain('portal');

      // A live one: while the stop is under way the page says so; a request that fails says so and gives
      // the button back (found from outside: busy, nothing said).
      const live = await subscribe('live-letters@example.com');
      await page.goto(live.url);
      let release: () => void = () => undefined;
      await page.route(live.url, (route) =>
        route.request().method() === 'POST' ? new Promise<void>((r) => (release = r)).then(() => route.abort()) : route.fallback(),
      );
      await page.getByRole('button', { name: 'Stop confirmations' }).click();
      await expect.poll(() => page.locator('#status').textContent()).toBe('Stopping…');
      release();
      await expect.poll(() => page.locator('#error').textContent()).toBe('Could not reach the server. Check your connection and try again.');
      expect(await page.locator('#status').textContent()).toBe('');
      expect(await page.evaluate(() => document.activeElement?.id)).toBe('stop');
      expect(problems.filter((m) => !/ERR_FAILED/.test(m))).toEqual([]);
      await page.close();
    } finally {
      await smtp.stop();
    }
  });

  it('without JavaScript a List-Unsubscribe link says in words what happened, for a good and a bad link (found from outside: raw JSON)', async () => {
    const smtp = await startSmtpServer('pages-nojs', 'pages-pass');
    const noJs = await browser.newContext({ viewport: PHONE, javaScriptEnabled: false });
    try {
      // A name with what String.replace would take for patterns (found in review: the page was garbled).
      const p = await plan({ name: "Quiet $& $' letters", amount_sats: 1500, trial_days: 14 });
      const put = await admin.put(`/plans/${p.id}/notification-settings`, { inherit: false, channels: { email: { smtp_url: smtp.url } } });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'nojs-letters@example.com' })).body;
      const mail = await until(
        async () => smtp.mails.find((m) => m.to.includes('nojs-letters@example.com')),
        (m) => !!m,
      );
      const url = /^<(.+)>$/.exec(mail!.headers['list-unsubscribe'] ?? '')![1]!;
      const page = await noJs.newPage();

      // A bad link: said at once, nothing to press (found from outside: the no-script button was there).
      const bad = url.replace(/\.[^.]+$/, '.AAAA');
      expect((await page.goto(bad))!.status()).toBe(404);
      await page.getByRole('heading', { name: 'This link does not work' }).waitFor();
      expect(await page.locator('main p').textContent()).toContain('The link is not one we sent');
      expect(await page.getByRole('button').count()).toBe(0);

      // A good one names what it stops and for which subscription, as the script's page does (found from
      // outside: "one kind of message about one subscription"); its button posts the form, and the person
      // reads a sentence, not the API's JSON.
      expect((await page.goto(url))!.status()).toBe(200);
      expect(await page.title()).toBe('Stop confirmations and receipts?');
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Stop confirmations and receipts?');
      expect(await page.locator('#what').textContent()).toMatch(
        /^You will no longer get confirmations and receipts for Quiet \$& \$' letters( from .+)? \(subscription started, payment received\)\. The receipts stay in your subscription portal\. To get confirmations and receipts again, turn them back on in your subscription portal \(its link is in every message about this subscription\)\. Cancellation notices are still sent\.$/,
      );
      expect(await page.locator('#what span[dir="auto"]').first().textContent()).toBe("Quiet $& $' letters");
      expect(await page.getByRole('button').count()).toBe(1);
      const answer = page.waitForResponse((r) => r.request().method() === 'POST');
      await page.getByRole('button', { name: 'Stop confirmations' }).click();
      const res = await answer;
      expect([res.status(), res.headers()['content-type']]).toEqual([200, 'text/html; charset=utf-8']);
      await page.getByRole('heading', { name: 'Done' }).waitFor();
      expect(await page.locator('main p').textContent()).toBe(
        "You will no longer get confirmations and receipts for Quiet $& $' letters. To get confirmations and receipts again, turn them back on in your subscription portal (its link is in every message about this subscription). Cancellation notices are still sent.",
      );
      expect(await page.locator('body').textContent()).not.toContain('{');
      expect((await admin.get(`/subscriptions/${sub.subscription_id}`)).body).toMatchObject({ receive_confirmations: false, receive_reminders: true });
      expect(await overflowsHorizontally(page)).toBe(false);
      await screenshots(page, 'unsubscribe-no-script-done');
      // Opened again: stopped already, said so, and nothing to press.
      await page.goto(url);
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Already stopped');
      expect(await page.locator('#what').textContent()).toMatch(/^You no longer get confirmations and receipts for Quiet \$& \$' letters/);
      expect(await page.getByRole('button').count()).toBe(0);
    } finally {
      await noJs.close();
      await smtp.stop();
    }
  });

  /** A time as the portal words it (common.ts `date` with the time). */
  const pageTime = (unix: number) =>
    `${new Intl.DateTimeFormat('en-GB', { dateStyle: 'long', timeStyle: 'short', timeZone: 'UTC' }).format(new Date(unix * 1000))} UTC`;
  /** A date as the portal words it (common.ts `date` without the time). */
  const pageDate = (unix: number) => new Intl.DateTimeFormat('en-GB', { dateStyle: 'long', timeZone: 'UTC' }).format(new Date(unix * 1000));

  // Last: it moves the clock past a period's end.
  it('a subscription in payment_failed says until when it can still be renewed: the end of the dunning window (found from outside)', async () => {
    const p = await plan({ name: 'Rescue', amount_sats: 1500 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'rescue@example.com' })).body;
    await pay(sub.payment_id);
    // And one paused, whose period ends with the clock's move.
    const paused = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'paused@example.com' })).body;
    await pay(paused.payment_id);
    await until(
      () => admin.get(`/subscriptions/${paused.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    expect((await admin.post(`/subscriptions/${paused.subscription_id}/pause`)).status).toBe(200);
    const active = await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    const end = active.body.current_period_end as number;
    const { now } = (await admin.post('/dev/clock', {})).body;
    expect((await admin.post('/dev/clock', { advance_seconds: end - now + 3600 })).status).toBe(200);
    await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'payment_failed',
    );
    await until(
      () => admin.get(`/payments?subscription_id=${sub.subscription_id}&status=pending`),
      (r) => r.body.items?.length === 1,
    );
    // No grace: the dunning window (DUNNING_DAYS, 14) starts at the period's end.
    const payBy = end + 14 * 86_400;
    const token = new URL(sub.manage_url).searchParams.get('token')!;
    const listed = await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': token } });
    expect(listed.body.items[0]).toMatchObject({ id: sub.subscription_id, status: 'payment_failed', pay_by: payBy });
    const { page, problems } = await openPage(phone);
    await page.goto(sub.manage_url);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await card.getByRole('heading', { name: 'Payment due' }).waitFor();
    expect(await card.locator('dt:text-is("Can be renewed until") + dd').textContent()).toBe(pageTime(payBy));
    // Not the invoice's own expiry (an hour or a day): a fresh invoice follows it until then.
    expect(await card.locator('.open-payment .hint').last().textContent()).toBe(
      `Pay by ${pageTime(payBy)} to keep your subscription; a new invoice replaces this one if it expires first.`,
    );
    await check(page, problems, 'portal-payment-failed');
    // 200% zoom on a 360 px phone: 180 CSS px, where a label stacks above its value (found from outside:
    // the page scrolled sideways).
    await page.setViewportSize({ width: 180, height: 780 });
    expect(await overflowsHorizontally(page)).toBe(false);
    // Text twice as large on a 320 px phone: every button stays inside its card (found from outside: "Cancel
    // subscription" and "Open in a Lightning wallet" reached past it, the page scrolled sideways).
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Page.setFontSizes', { fontSizes: { standard: 32, fixed: 26 } });
    await page.setViewportSize({ width: 320, height: 780 });
    expect(await overflowsHorizontally(page)).toBe(false);
    const outside = await card.evaluate((c) => {
      const box = c.getBoundingClientRect();
      return [...c.querySelectorAll('button, .button')]
        .filter((b) => {
          const r = b.getBoundingClientRect();
          return r.width > 0 && (r.left < box.left - 0.5 || r.right > box.right + 0.5);
        })
        .map((b) => b.textContent);
    });
    expect(outside).toEqual([]);
    await cdp.send('Page.setFontSizes', { fontSizes: { standard: 16, fixed: 13 } });
    // The same with the page's own text made twice as large (a reader's style), which media queries in
    // rem do not see (found from outside: the page scrolled sideways again).
    await page.evaluate(() => {
      document.documentElement.style.fontSize = '200%';
    });
    expect(await overflowsHorizontally(page)).toBe(false);
    await page.evaluate(() => {
      document.documentElement.style.fontSize = '';
    });
    await page.setViewportSize(PHONE);

    // Paused, its period over: not "Current period ends" a past date (found from outside).
    const pausedEnd = (await admin.get(`/subscriptions/${paused.subscription_id}`)).body;
    expect(pausedEnd).toMatchObject({ status: 'paused', has_access: false });
    await page.goto(paused.manage_url);
    const pausedCard = page.locator(`#sub-${paused.subscription_id}`);
    await pausedCard.getByRole('heading', { name: 'Rescue' }).waitFor();
    expect(await pausedCard.locator('dt:text-is("Period ended") + dd').textContent()).toBe(pageDate(pausedEnd.current_period_end));
    expect(await pausedCard.locator('dt:text-is("Current period ends")').count()).toBe(0);
    expect(problems).toEqual([]);
    await page.close();
  });

  // After the tests above: these move the clock past a trial's end, then a period's end.
  it('a trial over and paid says no more "Free trial until": the service\'s clock decides, not the device\'s (found from outside)', async () => {
    const p = await plan({ name: 'Trial then paid', amount_sats: 1600, trial_days: 7, grace_period_days: 3 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'trial-paid@example.com' })).body;
    const trialEnd = (await admin.get(`/subscriptions/${sub.subscription_id}`)).body.trial_end as number;
    const { page, problems } = await openPage(phone);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await page.goto(sub.manage_url);
    expect(await card.locator('dt:text-is("Free trial until") + dd').textContent()).toBe(pageDate(trialEnd));
    // The test clock (ahead of the phone's, moved by the tests before) past the trial's end, then paid.
    const { now } = (await admin.post('/dev/clock', {})).body;
    expect((await admin.post('/dev/clock', { advance_seconds: trialEnd - now + 3600 })).status).toBe(200);
    await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'past_due',
    );
    const due = await until(
      () => admin.get(`/payments?subscription_id=${sub.subscription_id}&status=pending`),
      (r) => r.body.items?.length === 1,
    );
    await pay(due.body.items[0].id);
    const paid = await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'active' && r.body.current_period_start >= trialEnd,
    );
    // The phone's clock is still before the trial's end: only the service knows it is over.
    expect(Date.now() / 1000).toBeLessThan(trialEnd);
    await page.reload();
    await card.locator('.status-active').waitFor();
    expect(await card.locator('dt:text-is("Renews on") + dd').textContent()).toBe(pageDate(paid.body.current_period_end));
    expect(await card.textContent()).not.toContain('Free trial');
    expect(await card.locator('dt:text-is("Paid by") + dd').textContent()).toBe('Lightning');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a past_due subscription extended past today says when its period ends, not that it ended and is overdue (found from outside)', async () => {
    const p = await plan({ name: 'Extended', amount_sats: 1700, grace_period_days: 3 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'extended@example.com' })).body;
    await pay(sub.payment_id);
    const active = await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    const { now } = (await admin.post('/dev/clock', {})).body;
    expect((await admin.post('/dev/clock', { advance_seconds: active.body.current_period_end - now + 3600 })).status).toBe(200);
    await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'past_due',
    );
    const { page, problems } = await openPage(phone);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    await page.goto(sub.manage_url);
    // Overdue, as it is before the extend.
    expect(await card.locator('.status-past_due').textContent()).toBe('Payment overdue');
    expect(await card.locator('dt:text-is("Period ended") + dd').textContent()).toBe(pageDate(active.body.current_period_end));
    expect((await admin.post(`/subscriptions/${sub.subscription_id}/extend?days=30`)).status).toBe(200);
    const extended = (await admin.get(`/subscriptions/${sub.subscription_id}`)).body;
    // It stays past_due by design (README, extend), its period ending in 30 days.
    expect(extended).toMatchObject({ status: 'past_due', current_period_end: active.body.current_period_end + 30 * 86_400 });
    await page.reload();
    await card.locator('dt:text-is("Status") + dd').waitFor();
    expect(await card.locator('dt:text-is("Status") + dd').textContent()).toBe('Renewal payment due');
    expect(await card.locator('dt:text-is("Current period ends") + dd').textContent()).toBe(pageDate(extended.current_period_end));
    expect(await card.textContent()).not.toMatch(/Period ended|Payment overdue/);
    await check(page, problems, 'portal-past-due-extended');
    await page.close();
  });

  it('a trial paused past its end, then extended, says no "Free trial until", with or without in_trial (an older billing sends none)', async () => {
    const p = await plan({ name: 'Paused trial', amount_sats: 1800, trial_days: 7 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'lightning', email: 'paused-trial@example.com' })).body;
    const trialEnd = (await admin.get(`/subscriptions/${sub.subscription_id}`)).body.trial_end as number;
    expect((await admin.post(`/subscriptions/${sub.subscription_id}/pause`)).status).toBe(200);
    const { now } = (await admin.post('/dev/clock', {})).body;
    expect((await admin.post('/dev/clock', { advance_seconds: trialEnd - now + 3600 })).status).toBe(200);
    // Without access when extended, it was not in its trial: the days go to the period, not the trial.
    expect((await admin.post(`/subscriptions/${sub.subscription_id}/extend?days=30`)).status).toBe(200);
    const extended = (await admin.get(`/subscriptions/${sub.subscription_id}`)).body;
    expect(extended).toMatchObject({ status: 'paused', trial_end: trialEnd, current_period_end: trialEnd + 30 * 86_400, has_access: true });
    const { page, problems } = await openPage(phone);
    const card = page.locator(`#sub-${sub.subscription_id}`);
    const shown = async () => {
      await card.locator('dt:text-is("Current period ends") + dd').waitFor();
      expect(await card.locator('dt:text-is("Current period ends") + dd').textContent()).toBe(pageDate(extended.current_period_end));
      expect(await card.textContent()).not.toMatch(/Free trial|Trial, then/);
    };
    await page.goto(sub.manage_url);
    await shown();
    await page.route('**/public/manage/subscriptions*', async (r) => {
      const res = await r.fetch();
      const body = await res.json();
      for (const item of body.items) delete item.in_trial;
      await r.fulfill({ response: res, json: body });
    });
    await page.reload();
    await shown();
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a cancel says truly what access is left (none after a grace period), "again" only once paid; a paused card says what pausing means (found from outside)', async () => {
    const graced = await plan({ name: 'Graceful', amount_sats: 1900, grace_period_days: 3 });
    const trialPlan = await plan({ name: 'Free first', amount_sats: 1900, trial_days: 7 });
    const started = async (planId: string, email: string, paid: boolean) => {
      const s = (await anon.post('/public/subscribe', { plan_id: planId, payment_method: 'lightning', email })).body;
      if (!paid) return s;
      await pay(s.payment_id);
      await until(
        () => admin.get(`/subscriptions/${s.subscription_id}`),
        (r) => r.body.status === 'active',
      );
      return s;
    };
    const late = await started(graced.id, 'grace-cancel@example.com', true);
    const paused = await started(graced.id, 'paused-card@example.com', true);
    const trial = await started(trialPlan.id, 'trial-cancel@example.com', false);
    expect((await admin.post(`/subscriptions/${paused.subscription_id}/pause`)).status).toBe(200);
    const { page, problems } = await openPage(phone);
    const dialogSays = async (s: { subscription_id: string; manage_url: string }) => {
      await page.goto(s.manage_url);
      await page.locator(`#sub-${s.subscription_id}`).getByRole('button', { name: 'Cancel subscription' }).click();
      return page.locator('#confirm-text').textContent();
    };
    const keep = () => page.getByRole('dialog').getByRole('button', { name: 'Keep subscription' }).click();

    // A trial never paid for: nothing was ever charged, so nothing is charged "again".
    const trialEnd = (await admin.get(`/subscriptions/${trial.subscription_id}`)).body.trial_end as number;
    expect(await dialogSays(trial)).toBe(`You keep access until ${pageDate(trialEnd)}. You will not be charged.`);
    await keep();

    // Paused by the seller, in its period: what that means, and the access it keeps meanwhile.
    const pausedEnd = (await admin.get(`/subscriptions/${paused.subscription_id}`)).body.current_period_end as number;
    const pausing = 'The seller has paused this subscription: it is not renewed, and you are not charged, until they resume it.';
    expect(await dialogSays(paused)).toBe(`You keep access until ${pageDate(pausedEnd)}. After that you will not be charged again.`);
    await keep();
    const pausedCard = page.locator(`#sub-${paused.subscription_id}`);
    expect(await pausedCard.locator('.paused').textContent()).toBe(`${pausing} While it is paused, your access lasts until ${pageDate(pausedEnd)}.`);
    await check(page, problems, 'portal-paused');

    // Past its period, in its grace: the grace is time to pay, and a cancel ends access at once.
    const { now } = (await admin.post('/dev/clock', {})).body;
    const end = (await admin.get(`/subscriptions/${late.subscription_id}`)).body.current_period_end as number;
    expect((await admin.post('/dev/clock', { advance_seconds: end - now + 3600 })).status).toBe(200);
    await until(
      () => admin.get(`/subscriptions/${late.subscription_id}`),
      (r) => r.body.status === 'past_due' && r.body.has_access === true,
    );
    expect(await dialogSays(late)).toBe('Cancelling ends your access now. You will not be charged again.');
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel subscription' }).click();
    await expect.poll(() => page.locator('#notice').textContent()).toBe('Graceful is cancelled. Your access has ended.');
    expect((await admin.get(`/subscriptions/${late.subscription_id}`)).body).toMatchObject({ status: 'cancelled', has_access: false });

    // The paused one, its period over meanwhile: no access left to keep.
    await page.goto(paused.manage_url);
    expect(await pausedCard.locator('.paused').textContent()).toBe(`${pausing} Your access ended with its period, on ${pageDate(pausedEnd)}.`);
    expect(await dialogSays(paused)).toBe('You will not be charged again.');
    await keep();
    // Resumed by the seller after its period: it waits for its renewal, not a "first" payment (found from
    // outside: "Waiting for the first payment" beside its receipt).
    const resumed = await admin.post(`/subscriptions/${paused.subscription_id}/resume`);
    expect([resumed.status, resumed.body.status]).toEqual([200, 'pending']);
    await page.goto(paused.manage_url);
    expect(await pausedCard.locator('.status-pending').textContent()).toBe('Waiting for the renewal payment');
    expect(problems).toEqual([]);
    await page.close();
  });

  // Last: it moves the shared clock on and restarts the payments service.
  it('a renewal the payments service refuses to make (card payments switched off): the card says no invoice could be made yet, not nothing (found from outside)', async () => {
    const p = await planWithMessages({ name: 'Card off', amount_sats: 2500, interval: 'weekly', allow_cardproc: true, grace_period_days: 2 });
    const sub = (await anon.post('/public/subscribe', { plan_id: p.id, payment_method: 'card', email: 'card-off@example.com' })).body;
    await pay(sub.payment_id);
    const active = await until(
      () => admin.get(`/subscriptions/${sub.subscription_id}`),
      (r) => r.body.status === 'active',
    );
    const provider = stack.env.CARDPROC_PROVIDER;
    delete stack.env.CARDPROC_PROVIDER;
    await stack.stopPayments();
    await stack.restartPayments();
    try {
      // A week's renewal is asked for a day ahead: refused, as the card rail is off.
      const { now } = (await admin.post('/dev/clock', {})).body;
      expect((await admin.post('/dev/clock', { advance_seconds: active.body.current_period_end - 86_400 + 600 - now })).status).toBe(200);
      await until(
        async () => (await stack.db.query('SELECT renewal_refused_at FROM billing.subscriptions WHERE id = $1', [sub.subscription_id])).rows[0],
        (r) => r.renewal_refused_at !== null,
      );
      const { page, problems } = await openPage(phone);
      await page.goto(sub.manage_url);
      const due = page.getByRole('region', { name: 'Payment due for Card off' });
      await due.waitFor();
      expect(await due.locator(`#refused-${sub.subscription_id}`).textContent()).toBe(
        "An invoice for this renewal could not be made yet: the seller's payment provider did not take it. We try again by ourselves.",
      );
      const token = new URL(sub.manage_url).searchParams.get('token')!;
      expect((await anon.get('/public/manage/subscriptions', { headers: { 'X-Subscriber-Token': token } })).body.items[0]).toMatchObject({
        renewal_refused: true,
        open_payment: null,
      });
      await check(page, problems, 'portal-renewal-refused', false);
      await page.close();
    } finally {
      stack.env.CARDPROC_PROVIDER = provider;
      await stack.stopPayments();
      await stack.restartPayments();
    }
  });
});
