import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { checkWebhookUrl, guardedLookup, isNostrPublicKey, isNostrSecretKey, relayPool, UrlNotAllowed, type AddressPolicy } from '@sb/runtime';
import { finalizeEvent, getPublicKey, type Event } from 'nostr-tools/pure';
import * as nip04 from 'nostr-tools/nip04';
import * as nip17 from 'nostr-tools/nip17';
import * as nip19 from 'nostr-tools/nip19';
import { delivered, failed, type SendOutcome } from './outcome.js';

const DM_RELAYS_KIND = 10050;
const NIP05_MAX_BYTES = 64 * 1024;

interface NostrOptions {
  /** Outsiders name the NIP-05 domains and DM relays this service connects to: the webhook address rules apply. */
  policy: AddressPolicy;
  timeoutMs: number;
  /** NIP-05 over http:// instead of https:// (local tests only). */
  nip05Http: boolean;
}

/** A recipient that can never be reached (a malformed key, an unknown NIP-05 name): not retried. */
class PermanentError extends Error {}

/** A key as 64 hex, from hex or its NIP-19 form (npub for public keys, nsec for secret ones). */
function hexKey(v: string, type: 'npub' | 'nsec'): string | undefined {
  const hex = hexForm(v.trim(), type);
  return hex && (type === 'npub' ? isNostrPublicKey(hex) : isNostrSecretKey(hex)) ? hex : undefined;
}

function hexForm(s: string, type: 'npub' | 'nsec'): string | undefined {
  if (/^[0-9a-f]{64}$/.test(s)) return s;
  if (!s.startsWith(`${type}1`)) return undefined;
  try {
    const d = nip19.decode(s);
    if (d.type !== type) return undefined;
    return typeof d.data === 'string' ? d.data : Buffer.from(d.data as Uint8Array).toString('hex');
  } catch {
    return undefined;
  }
}

export const toHexPubkey = (v: string): string | undefined => hexKey(v, 'npub');
export const toSecretKey = (v: string): Uint8Array | undefined => {
  const hex = hexKey(v, 'nsec');
  return hex ? Buffer.from(hex, 'hex') : undefined;
};

export const npubOf = (secretHex: string) => nip19.npubEncode(getPublicKey(Buffer.from(secretHex, 'hex')));
export const nsecOf = (secretHex: string) => nip19.nsecEncode(Buffer.from(secretHex, 'hex'));

const NIP05 = /^([a-z0-9._-]+)@([a-z0-9.-]+(?::\d{1,5})?)$/i;
export const isNostrContact = (v: string) => !!toHexPubkey(v) || NIP05.test(v.trim());

/** GET of a small JSON document with the webhook address checks, no redirects, bounded time and size. */
async function getJson(url: string, o: NostrOptions): Promise<unknown> {
  await checkWebhookUrl(url, o.policy);
  const u = new URL(url);
  const send = u.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(u, { method: 'GET', headers: { accept: 'application/json' }, lookup: guardedLookup(o.policy) }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        return reject(
          new Error(
            `${u.host} answered ${res.statusCode} to the NIP-05 lookup${res.statusCode && res.statusCode >= 300 && res.statusCode < 400 ? ' (redirects are not followed)' : ''}`,
          ),
        );
      }
      let raw = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        raw += c;
        if (raw.length > NIP05_MAX_BYTES) req.destroy(new Error('NIP-05 document too large'));
      });
      res.on('end', () => {
        try {
          resolve(JSON.parse(raw));
        } catch {
          reject(new PermanentError(`${u.host} serves no JSON at /.well-known/nostr.json`));
        }
      });
    });
    const timer = setTimeout(() => req.destroy(new Error(`${u.host} did not answer the NIP-05 lookup in time`)), o.timeoutMs);
    req.on('close', () => clearTimeout(timer));
    req.on('error', reject);
    req.end();
  });
}

/** The recipient's key, and relays a NIP-05 document names for it: from an npub, hex key or NIP-05 identifier. */
export async function resolveRecipient(contact: string, o: NostrOptions): Promise<{ pubkey: string; relays: string[] }> {
  const hex = toHexPubkey(contact);
  if (hex) return { pubkey: hex, relays: [] };
  const m = NIP05.exec(contact.trim());
  if (!m) throw new PermanentError('not an npub, hex key or NIP-05 identifier');
  const [, name, domain] = m as unknown as [string, string, string];
  const url = `${o.nip05Http ? 'http' : 'https'}://${domain}/.well-known/nostr.json?name=${encodeURIComponent(name.toLowerCase())}`;
  const doc = (await getJson(url, o)) as { names?: Record<string, unknown>; relays?: Record<string, unknown> };
  const pubkey = doc?.names?.[name.toLowerCase()] ?? doc?.names?.[name];
  if (typeof pubkey !== 'string' || !/^[0-9a-f]{64}$/.test(pubkey)) throw new PermanentError(`${domain} knows no Nostr key for ${name}`);
  const relays = doc.relays?.[pubkey];
  return { pubkey, relays: Array.isArray(relays) ? relays.filter((r): r is string => typeof r === 'string').slice(0, 5) : [] };
}

/** Relays we may connect to: ws(s) URLs passing the address rules. */
async function allowedRelays(urls: string[], o: NostrOptions): Promise<string[]> {
  const out: string[] = [];
  for (const u of new Set(urls)) {
    try {
      await checkWebhookUrl(u, o.policy, undefined, ['wss:', 'ws:']);
      out.push(u);
    } catch {
      /* skipped: private or malformed */
    }
  }
  return out;
}

/**
 * One direct message: NIP-17 (a kind 14 rumor, sealed with NIP-44 in kind 13 by the sender, gift-wrapped in
 * kind 1059 by a one-time key) or legacy NIP-04 (kind 4). Published to the recipient's DM relays (their
 * kind 10050 event, read from the configured relays), else to the configured relays; delivered when at
 * least one relay accepted it.
 */
export async function sendNostr(
  sender: { secretHex: string; relays: string[]; nip04: boolean },
  to: string,
  text: string,
  o: NostrOptions,
): Promise<SendOutcome> {
  const sk = Buffer.from(sender.secretHex, 'hex');
  const pool = relayPool();
  try {
    const recipient = await resolveRecipient(to, o);
    const configured = await allowedRelays(sender.relays, o);
    const listed = await new Promise<Event[]>((resolve) => {
      const events: Event[] = [];
      if (!configured.length) return resolve(events);
      pool.subscribeEose(
        configured,
        { kinds: [DM_RELAYS_KIND], authors: [recipient.pubkey], limit: 1 },
        {
          maxWait: Math.min(o.timeoutMs, 5000),
          onevent: (e) => events.push(e),
          onclose: () => resolve(events),
        },
      );
    });
    const newest = listed.filter((e) => e.pubkey === recipient.pubkey).sort((a, b) => b.created_at - a.created_at)[0];
    const dmRelays = await allowedRelays(newest ? newest.tags.filter((t) => t[0] === 'relay' && t[1]).map((t) => t[1]!) : [], o);
    const relays = dmRelays.length ? dmRelays.slice(0, 5) : configured.length ? configured : await allowedRelays(recipient.relays, o);
    if (!relays.length) {
      // Configured relays all refused by the address policy: that, not "none configured", is the reason.
      if (sender.relays.length)
        return failed(
          `no relay to publish to: the configured relays are not allowed (${sender.relays.slice(0, 3).join(', ')}: private, local or malformed)`,
          true,
        );
      return failed('no relay to publish to (none configured, none listed by the recipient)', true);
    }
    const event = sender.nip04
      ? finalizeEvent(
          { kind: 4, created_at: Math.floor(Date.now() / 1000), tags: [['p', recipient.pubkey]], content: nip04.encrypt(sk, recipient.pubkey, text) },
          sk,
        )
      : nip17.wrapEvent(sk, { publicKey: recipient.pubkey }, text);
    const acks = pool.publish(relays, event, { maxWait: o.timeoutMs });
    try {
      await Promise.any(acks);
      return delivered();
    } catch (err) {
      const reasons = err instanceof AggregateError ? err.errors.map((e) => (e instanceof Error ? e.message : String(e))) : [String(err)];
      return failed(`no relay accepted the message: ${[...new Set(reasons)].join('; ')}`);
    }
  } catch (err) {
    if (err instanceof PermanentError) return failed(err.message, true);
    if (err instanceof UrlNotAllowed) return failed(`NIP-05 domain not allowed: it ${err.message}`, true);
    return failed((err as Error).message || String(err));
  } finally {
    pool.destroy();
  }
}
