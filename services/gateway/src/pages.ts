import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { brotliCompress, constants as zlib, gzip } from 'node:zlib';
import express, { type Request, type Response } from 'express';
import { API_PREFIX } from '@sb/contracts';
import type { Logger } from '@sb/runtime';

/** Where `npm run build` puts the pages (web/dist), seen from services/gateway/dist. */
export const DEFAULT_WEB_DIR = fileURLToPath(new URL('../../../web/dist', import.meta.url));

const BASE = '/subscriptions_manager';

/**
 * Only our own scripts, styles and API: no inline script, no eval, no other origin, no framing. `data:`
 * images are Swagger UI's icons and the pages' own icon; QR codes are SVG elements drawn by the page.
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

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
  '.png': 'image/png',
};
/** Text compresses; fonts and images are compressed already. */
const COMPRESSIBLE = new Set(['.html', '.js', '.css', '.svg', '.json', '.map', '.txt']);

type Encoding = 'br' | 'gzip';

/**
 * A built file in memory with its compressed forms, made once, off the event loop, at its first request
 * (brotli at its best quality takes seconds for Swagger UI's 1.5 MB bundle, so not at every start of
 * the gateway). Until brotli is ready a client that also accepts gzip gets gzip, which takes milliseconds.
 */
export class StaticFile {
  readonly type: string;
  readonly compressible: boolean;
  private ready: Partial<Record<Encoding, Buffer | null>> = {};
  private pending?: Record<Encoding, Promise<Buffer | null>>;

  constructor(
    readonly body: Buffer,
    ext: string,
    readonly etag?: string,
    readonly lastModified?: string,
  ) {
    this.type = TYPES[ext] ?? 'application/octet-stream';
    this.compressible = COMPRESSIBLE.has(ext) && body.length > 1024;
  }

  private compress(): Record<Encoding, Promise<Buffer | null>> {
    const body = this.body;
    // Kept only when it saves something; null means "send it as it is".
    const keep = (enc: Encoding) => (out: Buffer) => (this.ready[enc] = out.length < body.length ? out : null);
    const params = {
      [zlib.BROTLI_PARAM_QUALITY]: zlib.BROTLI_MAX_QUALITY,
      [zlib.BROTLI_PARAM_MODE]: zlib.BROTLI_MODE_TEXT,
      [zlib.BROTLI_PARAM_SIZE_HINT]: body.length,
    };
    this.pending ??= {
      br: promisify(brotliCompress)(body, { params }).then(keep('br'), () => (this.ready.br = null)),
      gzip: promisify(gzip)(body, { level: zlib.Z_BEST_COMPRESSION }).then(keep('gzip'), () => (this.ready.gzip = null)),
    };
    return this.pending;
  }

  /** The body in the best encoding the request accepts (identity when none). */
  async negotiate(req: Request): Promise<{ body: Buffer; encoding?: Encoding }> {
    const accepted = this.compressible ? acceptedEncodings(req.headers['accept-encoding']) : [];
    if (!accepted.length) return { body: this.body };
    const pending = this.compress();
    for (const enc of accepted) {
      const out = this.ready[enc];
      if (out) return { body: out, encoding: enc };
    }
    // None ready yet: wait for the quickest one accepted.
    for (const enc of accepted.includes('gzip') ? (['gzip', 'br'] as const) : (['br'] as const)) {
      const out = await pending[enc];
      if (out && accepted.includes(enc)) return { body: out, encoding: enc };
    }
    return { body: this.body };
  }
}

/** The encodings an Accept-Encoding header allows, best first (brotli before gzip at equal weight). */
function acceptedEncodings(header: string | undefined): Encoding[] {
  if (!header) return [];
  const q = new Map<string, number>();
  for (const part of header.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    const w = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const weight = w ? Number(w.slice(2)) : 1;
    q.set(name, Number.isFinite(weight) ? weight : 0);
  }
  const weight = (enc: Encoding) => q.get(enc) ?? q.get('*') ?? 0;
  return (['br', 'gzip'] as const).filter((e) => weight(e) > 0).sort((a, b) => weight(b) - weight(a));
}

/** A document made at start (the OpenAPI JSON), served like a built file: compressed, with a strong ETag. */
export function jsonFile(value: unknown): StaticFile {
  const body = Buffer.from(JSON.stringify(value));
  return new StaticFile(body, '.json', `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`);
}

/** Sends a page or an asset, compressed when the client accepts it. */
export async function sendFile(req: Request, res: Response, file: StaticFile): Promise<void> {
  if (file.compressible) res.vary('Accept-Encoding');
  const { body, encoding } = await file.negotiate(req);
  if (encoding) res.setHeader('Content-Encoding', encoding);
  res.setHeader('Content-Type', file.type);
  if (file.etag) res.setHeader('ETag', file.etag);
  if (file.lastModified) res.setHeader('Last-Modified', file.lastModified);
  // Express answers 304 when the request's validators match, and sends no body for HEAD.
  res.send(body);
}

/** The built assets by their path under assets/ ("/checkout-abc123.js"): nothing else is ever served. */
function readAssets(dir: string): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  for (const name of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
    const path = join(dir, name);
    const stat = statSync(path);
    if (!stat.isFile()) continue;
    // The validators express.static sent: a weak ETag of size and modification time, and Last-Modified.
    const etag = `W/"${stat.size.toString(16)}-${stat.mtime.getTime().toString(16)}"`;
    files.set(`/${relative(dir, path).split(sep).join('/')}`, new StaticFile(readFileSync(path), extname(name), etag, stat.mtime.toUTCString()));
  }
  return files;
}

/**
 * The hosted pages built from web/: the checkout page of a plan, the subscriber portal (the manage_url
 * billing hands out) and the API reference. The HTML is revalidated on every visit (it names the
 * current assets); the assets have content hashes in their names, so they are cached for a year. All
 * are read once at start and sent brotli- or gzip-compressed to the clients that accept it.
 */
export function pagesRouter(webDir: string, log: Logger): express.Router {
  const router = express.Router();
  const built = existsSync(join(webDir, 'checkout.html'));
  if (!built) log.warn({ web_dir: webDir }, 'hosted pages are not built (npm run build): checkout, portal and API reference answer 404');
  const html = (name: string) => (built ? new StaticFile(readFileSync(join(webDir, name)), '.html') : undefined);
  const pages = { checkout: html('checkout.html'), manage: html('manage.html'), docs: html('docs.html'), unsubscribe: html('unsubscribe.html') };

  const page = (id: keyof typeof pages) => (req: Request, res: Response, next: express.NextFunction) => {
    res.locals.routeId = `page.${id}`;
    const file = pages[id];
    if (!file) return void res.status(404).json({ detail: 'The hosted pages are not built on this server' });
    securityHeaders(res);
    res.setHeader('Cache-Control', 'no-cache');
    sendFile(req, res, file).catch(next);
  };
  // Without a plan id: the page's own "Plan not found", not the API's JSON 404.
  router.get([`${BASE}/checkout`, `${BASE}/checkout/:planId`], page('checkout'));
  router.get(`${BASE}/manage`, page('manage'));
  router.get([`${API_PREFIX}/docs`, `${API_PREFIX}/docs/`], page('docs'));
  // A List-Unsubscribe URL opened in a browser: a page that asks (what the link turns off, from the same
  // URL's JSON), and POSTs the same URL only when its button is pressed. Nothing changes on a GET.
  router.get(`${API_PREFIX}/public/unsubscribe/:token`, page('unsubscribe'));
  if (built) {
    const assets = readAssets(join(webDir, 'assets'));
    router.use(`${BASE}/assets`, (req, res, next) => {
      const file = req.method === 'GET' || req.method === 'HEAD' ? assets.get(req.path) : undefined;
      if (!file) return next();
      res.locals.routeId = 'page.assets';
      securityHeaders(res);
      res.setHeader('Cache-Control', 'public, max-age=31536000, immutable');
      sendFile(req, res, file).catch(next);
    });
  }
  return router;
}
