import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { Webhook } from 'standardwebhooks';
import { checkUrlWithoutDns, guardedLookup, UrlNotAllowed, type AddressPolicy } from '@sb/runtime';
import type { AttemptOutcome } from './store/deliveries.repo.js';

/** Receivers' answers are not kept; this much of an error body is enough to say what went wrong. */
const MAX_ERROR_CHARS = 300;

/**
 * Connections kept open per receiver (host and port) between deliveries: a connection per POST costs
 * more round trips than the POST. Agents of their own, not the process-wide ones: every socket in them
 * was connected through `guardedLookup`, so a kept connection is one to an address that was checked
 * (literal addresses are checked before the request). Idle ones close before a receiver's usual 5 s
 * keep-alive ends, so a POST rarely meets a connection the receiver is closing.
 */
const agents = new Map<boolean, { http: HttpAgent; https: HttpsAgent }>();
function agentsFor(policy: AddressPolicy) {
  let a = agents.get(policy.allowPrivate);
  if (!a) {
    const o = { keepAlive: true, timeout: 4000, lookup: guardedLookup(policy) };
    a = { http: new HttpAgent(o), https: new HttpsAgent(o) };
    agents.set(policy.allowPrivate, a);
  }
  return a;
}

/**
 * One POST of a WebhookEvent body, signed per Standard Webhooks. Redirects are not followed (a 3xx is a
 * failed attempt): following one would reach a URL nobody checked.
 */
export async function sendWebhook(
  target: { url: string; secret: string; eventId: string; body: string },
  opts: { policy: AddressPolicy; timeoutMs: number },
): Promise<AttemptOutcome> {
  const started = Date.now();
  const done = (o: Omit<AttemptOutcome, 'duration_ms'>): AttemptOutcome => ({ ...o, duration_ms: Date.now() - started });
  // A host name's addresses are checked by the lookup the connection is made with (and only when one is
  // made): checking them here too would cost a DNS query per POST and prove nothing about the connection.
  try {
    checkUrlWithoutDns(target.url, opts.policy);
  } catch (err) {
    if (err instanceof UrlNotAllowed) return done({ status_code: null, error: `URL not allowed: it ${err.message}`, delivered: false });
    throw err;
  }
  // Real time, not the test clock: receivers check it against their own clock (5 minutes tolerance).
  const sentAt = new Date();
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'sats-subscriptions-webhooks/1',
    'webhook-id': target.eventId,
    'webhook-timestamp': String(Math.floor(sentAt.getTime() / 1000)),
    'webhook-signature': new Webhook(target.secret).sign(target.eventId, sentAt, target.body),
    'content-length': String(Buffer.byteLength(target.body)),
  };
  const url = new URL(target.url);
  const https = url.protocol === 'https:';
  const send = https ? httpsRequest : httpRequest;
  const agent = https ? agentsFor(opts.policy).https : agentsFor(opts.policy).http;
  return new Promise<AttemptOutcome>((resolve) => {
    const req = send(url, { method: 'POST', headers, agent, lookup: guardedLookup(opts.policy) }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        if (text.length < MAX_ERROR_CHARS) text += c;
      });
      res.on('end', () => {
        const code = res.statusCode ?? 0;
        const ok = code >= 200 && code < 300;
        resolve(done({ status_code: code, error: ok ? null : `HTTP ${code}${text ? `: ${text.slice(0, MAX_ERROR_CHARS)}` : ''}`, delivered: ok }));
      });
      res.on('error', (err) => resolve(done({ status_code: res.statusCode ?? null, error: err.message, delivered: false })));
    });
    // The whole exchange, not just socket idleness: a receiver dribbling bytes must not hold a worker.
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${opts.timeoutMs} ms`)), opts.timeoutMs);
    req.on('close', () => clearTimeout(timer));
    req.on('error', (err) =>
      resolve(
        done({
          status_code: null,
          error: err instanceof UrlNotAllowed ? `URL not allowed: it ${err.message}` : err.message || String(err),
          delivered: false,
        }),
      ),
    );
    req.end(target.body);
  });
}
