import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { brotliCompress, constants as zlib, gzip } from 'node:zlib';
import express, { type Request, type Response } from 'express';
import {
  API_PREFIX,
  htmlText,
  LINK_DOES_NOT_WORK,
  NO_PLAN_NAMED,
  PLAN_NOT_FOUND,
  PLAN_NOT_OFFERED,
  type RouteDef,
  UNSUBSCRIBE_LINK_UNKNOWN,
  unsubscribeWords,
  type UnsubscribeLinkView,
} from '@sb/contracts';
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

/** A page of words the gateway writes itself (web/message.html): its title (the heading too) and paragraphs. */
export interface Message {
  title: string;
  text: readonly string[];
}

/** A page's own words for an address under its path that names nothing (a browser asking gets them, 404). */
const NOT_FOUND: Record<'checkout' | 'manage' | 'unsubscribe', Message> = {
  // The checkout page's own words for a link that names no plan (web/src/checkout.ts, the same constants).
  checkout: { title: PLAN_NOT_FOUND, text: [NO_PLAN_NAMED] },
  manage: {
    title: 'Page not found',
    text: ['Nothing is at this address. Open the link to manage your subscription from a message about it, or ask the seller to send it again.'],
  },
  // A List-Unsubscribe link cut short (mail programs wrap long addresses): the page's words for a bad link.
  unsubscribe: { title: LINK_DOES_NOT_WORK, text: [UNSUBSCRIBE_LINK_UNKNOWN] },
};

/** The words a person reads for what the List-Unsubscribe URL answered (its GET, or its form posted without JavaScript). */
function unsubscribeMessage(status: number, body: unknown): Message {
  // The page's own words (web/src/unsubscribe.ts).
  if (status === 404) {
    return { title: LINK_DOES_NOT_WORK, text: [UNSUBSCRIBE_LINK_UNKNOWN] };
  }
  const message = (body as { message?: unknown } | undefined)?.message;
  if (status < 300) return { title: 'Done', text: [typeof message === 'string' && message ? message : 'You will no longer get these messages.'] };
  if (status === 429) return { title: 'Not stopped yet', text: ['Too many attempts in a short time. Please wait a moment, then go back and try again.'] };
  return { title: 'Not stopped yet', text: ['The service is not available right now: nothing was changed. Please go back and try again in a moment.'] };
}

/**
 * The List-Unsubscribe page for the link its route answered: without JavaScript it names the kind of
 * messages and the subscription as the script does (found from outside: "one kind of message about one
 * subscription"), with the form only while something is left to stop. Undefined for any other answer.
 */
function unsubscribePage(body: unknown): ((html: string) => string) | undefined {
  const link = body as UnsubscribeLinkView | undefined;
  if (link?.kind !== 'reminders' && link?.kind !== 'confirmations') return undefined;
  // The seller's names keep their own direction inside our sentence, as on the page.
  const { title, what, button } = unsubscribeWords(link, (name) => ({ html: `<span dir="auto">${htmlText(name)}</span>` }));
  const sentence = what.map((part) => (typeof part === 'string' ? htmlText(part) : part.html)).join('');
  const form = button
    ? `<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">${htmlText(button)}</button></form>`
    : '';
  return (html) =>
    html
      // Replaced by functions: a `$&` or `$'` in a seller's name is text, not a replacement pattern (found in review).
      .replace(/<title>[^<]*<\/title>/, () => `<title>${htmlText(title)}</title>`)
      .replace(/<h1 id="title">[^<]*<\/h1>/, () => `<h1 id="title">${htmlText(title)}</h1>`)
      .replace(/<noscript>[\s\S]*?<\/noscript>/, () => `<noscript><p id="what">${sentence}</p>${form}</noscript>`);
}

/** Pages whose GET answer shapes the page served (its words without JavaScript). */
const FILLS: Partial<Record<NonNullable<RouteDef['page']>, (body: unknown) => ((html: string) => string) | undefined>> = { unsubscribe: unsubscribePage };

export interface HostedPages {
  router: express.Router;
  /** Sends a built page (JSON 404 when the pages are not built). */
  send(id: PageId, req: Request, res: Response, next: express.NextFunction): void;
  /** Sends a built page changed by `fill` for this one request (not kept by any cache). */
  fill(id: PageId, req: Request, res: Response, fill: (html: string) => string, next: express.NextFunction): void;
  /** Answers `status` with a page of words; `fallback` (the JSON it replaces) when the pages are not built. */
  message(req: Request, res: Response, status: number, message: Message, fallback: () => void): void;
}

/** Where web/message.html takes a page's words. */
const MESSAGE_SLOT = '<main id="main" tabindex="-1"></main>';

type PageId = 'checkout' | 'manage' | 'docs' | 'unsubscribe';

/**
 * Whether the plan a checkout address names can be bought: `offered` false when it does not exist (or is
 * archived, or its id could not be one; `archived` says which, when known), undefined when that cannot be
 * told now (billing away, the address over its budget), which serves the page: it asks again itself and
 * says what it finds.
 */
export type PlanOffered = (req: Request, planId: string) => Promise<{ offered: boolean; archived?: boolean | undefined } | undefined>;

/** Whether a request prefers HTML to JSON (a browser), as the API decides between a page and its JSON. */
export const prefersHtml = (req: Request) => req.accepts(['json', 'html']) === 'html';

/**
 * The hosted pages built from web/: the checkout page of a plan, the subscriber portal (the manage_url
 * billing hands out), the API reference, the page of a List-Unsubscribe link, and the pages of words the
 * gateway writes itself. The HTML is revalidated on every visit (it names the current assets); the
 * assets have content hashes in their names, so they are cached for a year. All are read once at start
 * and sent brotli- or gzip-compressed to the clients that accept it.
 */
export function hostedPages(webDir: string, log: Logger, planOffered: PlanOffered): HostedPages {
  const router = express.Router();
  const built = existsSync(join(webDir, 'checkout.html'));
  if (!built) log.warn({ web_dir: webDir }, 'hosted pages are not built (npm run build): checkout, portal and API reference answer 404');
  const html = (name: string) => (built ? new StaticFile(readFileSync(join(webDir, name)), '.html') : undefined);
  const pages: Record<PageId, StaticFile | undefined> = {
    checkout: html('checkout.html'),
    manage: html('manage.html'),
    docs: html('docs.html'),
    unsubscribe: html('unsubscribe.html'),
  };
  const templatePath = join(webDir, 'message.html');
  const template = built && existsSync(templatePath) ? readFileSync(templatePath, 'utf8') : undefined;
  if (template && !template.includes(MESSAGE_SLOT)) throw new Error(`web/message.html has no ${MESSAGE_SLOT} for the words`);

  const send: HostedPages['send'] = (id, req, res, next) => {
    res.locals.routeId = `page.${id}`;
    const file = pages[id];
    if (!file) return void res.status(404).json({ detail: 'The hosted pages are not built on this server' });
    securityHeaders(res);
    res.setHeader('Cache-Control', 'no-cache');
    sendFile(req, res, file).catch(next);
  };
  const fill: HostedPages['fill'] = (id, req, res, change, next) => {
    const file = pages[id];
    if (!file) return send(id, req, res, next);
    res.locals.routeId = `page.${id}`;
    securityHeaders(res);
    res.setHeader('Cache-Control', 'no-store');
    sendFile(req, res, new StaticFile(Buffer.from(change(file.body.toString('utf8'))), '.html')).catch(next);
  };
  const message: HostedPages['message'] = (req, res, status, { title, text }, fallback) => {
    if (!template) return fallback();
    const words = [`<h1>${htmlText(title)}</h1>`, ...text.map((t) => `<p>${htmlText(t)}</p>`)].join('\n    ');
    const body = template
      // Replaced by functions: a `$&` in the words (a plan's name in the service's answer) is text.
      .replace(/<title>[^<]*<\/title>/, () => `<title>${htmlText(title)}</title>`)
      .replace(MESSAGE_SLOT, () => MESSAGE_SLOT.replace('><', () => `>\n    ${words}\n  <`));
    securityHeaders(res);
    // Each says what happened to this one request: not kept, not given for another.
    res.setHeader('Cache-Control', 'no-store');
    res.status(status);
    sendFile(req, res, new StaticFile(Buffer.from(body), '.html')).catch((err) => res.destroy(err));
  };
  const page = (id: PageId) => (req: Request, res: Response, next: express.NextFunction) => send(id, req, res, next);

  // An address under a page's path that names nothing (no plan id, a plan not offered, more after the
  // plan id, a plan id that does not decode, more after /manage) is 404 with that page's own "not found".
  // Under /checkout, which links send people to, every client gets those words but one that asks for
  // JSON (a checkout of no plan or an unknown plan answered 200 before, the page's script saying "not
  // found" to a person but to no crawler or link checker); under /manage a browser does, others the JSON.
  const wantsPage = { checkout: (req: Request) => req.accepts(['html', 'json']) !== 'json', manage: prefersHtml, unsubscribe: prefersHtml };
  const notFound =
    (id: keyof typeof NOT_FOUND, words = NOT_FOUND[id]) =>
    (req: Request, res: Response, next: express.NextFunction) => {
      res.vary('Accept');
      if (!wantsPage[id](req)) return next();
      res.locals.routeId = `page.${id}`;
      message(req, res, 404, words, next);
    };
  const planGone = notFound('checkout', { title: PLAN_NOT_FOUND, text: [PLAN_NOT_OFFERED] });
  router.get(`${BASE}/checkout`, notFound('checkout'));
  router.get(`${BASE}/checkout/:planId`, (req, res, next) => {
    // Naming a payment, the page is served even for a plan withdrawn since: its script says what became
    // of that payment (one paid late is recorded, and to be refunded), not only "Plan not found". Not for
    // a plan that never was (found in review: a 200 for any id), unless billing could not say (older).
    const followsPayment = typeof req.query.payment === 'string';
    planOffered(req, req.params.planId as string)
      .then((plan) => (plan && !plan.offered && !(followsPayment && plan.archived !== false) ? planGone(req, res, next) : send('checkout', req, res, next)))
      .catch(next);
  });
  router.get(`${BASE}/manage`, page('manage'));
  router.get(`${BASE}/checkout/*rest`, notFound('checkout'));
  router.get(`${BASE}/manage/*rest`, notFound('manage'));
  // A path segment that does not decode (a lone surrogate, `%ED%A0%80`) fails the match of the routes above.
  router.use([`${BASE}/checkout`, `${BASE}/manage`], (err: unknown, req: Request, res: Response, next: express.NextFunction) => {
    if (!(err instanceof URIError) || (req.method !== 'GET' && req.method !== 'HEAD')) return next(err);
    notFound(req.baseUrl.endsWith('/manage') ? 'manage' : 'checkout')(req, res, () => next(err));
  });
  router.get([`${API_PREFIX}/docs`, `${API_PREFIX}/docs/`], page('docs'));
  // The link's own route takes one token: none, or more after it (found from outside: raw JSON to a browser).
  router.get([`${API_PREFIX}/public/unsubscribe`, `${API_PREFIX}/public/unsubscribe/*rest`], notFound('unsubscribe'));
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
  return { router, send, fill, message };
}

/** What each page's route answers a browser in words (RouteDef.page). */
const ANSWERS: Record<NonNullable<RouteDef['page']>, (status: number, body: unknown) => Message> = { unsubscribe: unsubscribeMessage };

/**
 * A browser's request of a route that is also a page (RouteDef.page): the route runs as for any client,
 * and what it answers, a refusal or an error included, becomes a page. A GET it answers is the page itself
 * (whose script asks the route again, as JSON, and says what it finds); a GET it refuses with 404 (a link
 * that is not ours) a page that says so, with no form to post; any other method's answer (the page's form
 * posted without JavaScript) its words, with the route's status.
 */
export function answerAsPage(pages: HostedPages, id: NonNullable<RouteDef['page']>, req: Request, res: Response): void {
  const json = res.json;
  res.json = (body: unknown) => {
    res.json = json;
    const status = res.statusCode;
    const fallback = () => void json.call(res, body);
    if ((req.method === 'GET' || req.method === 'HEAD') && status !== 404) {
      // Refused for now (too many requests, a service away): the page's script asks again and says so.
      const filled = status < 300 ? FILLS[id]?.(body) : undefined;
      res.status(200);
      const next = (err?: unknown) => (err ? res.destroy(err as Error) : fallback());
      if (filled) pages.fill(id, req, res, filled, next);
      else pages.send(id, req, res, next);
    } else {
      pages.message(req, res, status, ANSWERS[id](status, body), fallback);
    }
    return res;
  };
}
