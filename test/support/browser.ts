import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

/**
 * Debian's chromium driven by playwright-core (no browser download). CHROMIUM_PATH overrides where it
 * is looked for; without one the browser tests are skipped (CI installs it, see .ci/run).
 */
export const CHROMIUM = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p): p is string => !!p && existsSync(p));

const ARTIFACTS = join(import.meta.dirname, '..', '..', 'test-artifacts', 'pages');

export const PHONE = { width: 360, height: 780 };
export const DESKTOP = { width: 1280, height: 900 };

export function launch(): Promise<Browser> {
  // A fresh temporary profile per launch (playwright's default); nothing reaches out to the internet.
  return chromium.launch({
    executablePath: CHROMIUM!,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
}

/** A page whose console errors (CSP violations included) and failed page loads are collected. */
export async function openPage(ctx: BrowserContext): Promise<{ page: Page; problems: string[] }> {
  const page = await ctx.newPage();
  const problems: string[] = [];
  page.on('console', (m) => {
    // 4xx answers the page expects (a bad token, an expired plan) are logged by the browser as errors too.
    if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  return { page, problems };
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const IMPACTS = ['minor', 'moderate', 'serious', 'critical'];

/**
 * axe-core on the page as it is now: the violations of `least` impact or more (serious and critical
 * unless asked), as readable lines. Injected with evaluate (not a script tag), so the page's
 * Content-Security-Policy stays as strict as served.
 */
export async function axeViolations(page: Page, least: 'moderate' | 'serious' = 'serious'): Promise<string[]> {
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const r = await (
      window as unknown as {
        axe: { run: (ctx: Document, o: object) => Promise<{ violations: { id: string; impact: string; help: string; nodes: { target: string[] }[] }[] }> };
      }
    ).axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.slice(0, 5).map((n) => n.target.join(' ')) }));
  });
  return violations.filter((v) => IMPACTS.indexOf(v.impact) >= IMPACTS.indexOf(least)).map((v) => `${v.impact} ${v.id}: ${v.help} (${v.targets.join(', ')})`);
}

/** Screenshots at phone and desktop width (the whole page unless `fullPage` is false), as test artifacts (git-ignored). */
export async function screenshots(page: Page, name: string, fullPage = true): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const size = page.viewportSize();
  for (const [label, vp] of [
    ['phone', PHONE],
    ['desktop', DESKTOP],
  ] as const) {
    await page.setViewportSize(vp);
    await page.screenshot({ path: join(ARTIFACTS, `${name}-${label}.png`), fullPage });
  }
  if (size) await page.setViewportSize(size);
}

/** Whether the page is wider than its viewport (a phone would scroll sideways). */
export function overflowsHorizontally(page: Page): Promise<boolean> {
  return page.evaluate(() => document.documentElement.scrollWidth > document.documentElement.clientWidth + 1);
}

/**
 * The live regions (role=status, aria-live) that are not rendered (display: none, often while empty):
 * screen readers take a region into account only when it is there before it changes, so these would
 * say nothing when their text comes.
 */
export function hiddenLiveRegions(page: Page): Promise<string[]> {
  return page.evaluate(() =>
    [...document.querySelectorAll<HTMLElement>('[role=status], [aria-live]')]
      .filter((el) => !el.checkVisibility())
      .map((el) => el.id || el.className || el.tagName),
  );
}
