import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import express, { type Request, type Response } from 'express';
import { API_PREFIX } from '@sb/contracts';
import type { Logger } from '@sb/runtime';

/** Where `npm run build` puts the pages (web/dist), seen from services/gateway/dist. */
export const DEFAULT_WEB_DIR = fileURLToPath(new URL('../../../web/dist', import.meta.url));

const BASE = '/subscriptions_manager';

/**
 * Only our own scripts, styles and API: no inline script, no eval, no other origin, no framing. `data:`
 * images are Swagger UI's icons; QR codes are SVG elements drawn by the page.
 */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

function securityHeaders(res: Response): void {
  res.setHeader('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  // The portal's URL carries the subscriber's token: it must never leave in a Referer.
  res.setHeader('Referrer-Policy', 'no-referrer');
  res.setHeader('X-Frame-Options', 'DENY');
  res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
}

/**
 * The hosted pages built from web/: the checkout page of a plan, the subscriber portal (the manage_url
 * billing hands out) and the API reference. The HTML is revalidated on every visit (it names the
 * current assets); the assets have content hashes in their names, so they are cached for a year.
 */
export function pagesRouter(webDir: string, log: Logger): express.Router {
  const router = express.Router();
  const built = existsSync(join(webDir, 'checkout.html'));
  if (!built) log.warn({ web_dir: webDir }, 'hosted pages are not built (npm run build): checkout, portal and API reference answer 404');
  const html = (name: string) => (built ? readFileSync(join(webDir, name)) : undefined);
  const pages = { checkout: html('checkout.html'), manage: html('manage.html'), docs: html('docs.html') };

  const page = (id: keyof typeof pages) => (_req: Request, res: Response) => {
    res.locals.routeId = `page.${id}`;
    const body = pages[id];
    if (!body) return void res.status(404).json({ detail: 'The hosted pages are not built on this server' });
    securityHeaders(res);
    res.setHeader('Cache-Control', 'no-cache');
    res.type('html').send(body);
  };
  router.get(`${BASE}/checkout/:planId`, page('checkout'));
  router.get(`${BASE}/manage`, page('manage'));
  router.get([`${API_PREFIX}/docs`, `${API_PREFIX}/docs/`], page('docs'));
  if (built) {
    router.use(
      `${BASE}/assets`,
      (_req, res, next) => {
        res.locals.routeId = 'page.assets';
        securityHeaders(res);
        next();
      },
      express.static(join(webDir, 'assets'), { index: false, immutable: true, maxAge: '365d', etag: true, redirect: false }),
    );
  }
  return router;
}
