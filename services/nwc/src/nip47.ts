import { relayPool, checkWebhookUrl, UrlNotAllowed, type AddressPolicy, type Resolve } from '@sb/runtime';
import { finalizeEvent, type Event } from 'nostr-tools/pure';
import * as nip04 from 'nostr-tools/nip04';
import * as nip44 from 'nostr-tools/nip44';
import { NWC_ERROR_CODES, type NWCErrorCode } from '@sb/contracts';
import { parseConnectionString, type WalletConnection } from './connection-string.js';
import { clipMessage, mayPayLater } from './domain/charge.js';

const INFO_KIND = 13194;
const REQUEST_KIND = 23194;
const RESPONSE_KIND = 23195;
/** How long a wallet's error answer waits for a second answer with the preimage (it paid after all). */
const SECOND_ANSWER_MS = 2_000;
export type Encryption = 'nip44_v2' | 'nip04';

/** A connection as a payment needs it: the parsed string plus the encryption the wallet advertised. */
interface PayingConnection extends Pick<WalletConnection, 'pubkey' | 'relays' | 'secret'> {
  encryption: Encryption;
}

/** `unsent`: the request reached no relay, so the wallet cannot have it (it cannot pay it later either). */
type PayResult = { preimage: string } | { error: { code: NWCErrorCode; message: string }; unsent?: true };

/** The wallet cannot be used; `message` is the sentence shown to the subscriber. */
export class WalletCheckError extends Error {}

const seconds = (ms: number) => `${Math.round(ms / 100) / 10} seconds`;

/** Methods and encryption of a wallet's info event (kind 13194): content lists methods; no `encryption` tag means NIP-04 only. */
export function readInfoEvent(e: Pick<Event, 'content' | 'tags'>): { methods: string[]; encryption: Encryption | undefined } {
  const methods = e.content.split(/[\s,]+/).filter(Boolean);
  const tag = e.tags.find((t) => t[0] === 'encryption');
  const offered = tag ? (tag[1] ?? '').split(/\s+/) : ['nip04'];
  const encryption = offered.includes('nip44_v2') ? 'nip44_v2' : offered.includes('nip04') ? 'nip04' : undefined;
  return { methods, encryption };
}

/**
 * Anyone may submit a connection string, and this service then connects to its relays from inside the
 * deployment: a relay must be a public address, or the answers would map internal hosts and ports. Those
 * that are not are left out (never contacted); with none left, the first one's fault is the refusal.
 * Looked up side by side (a string names at most MAX_RELAYS).
 */
export async function usableRelays(conn: WalletConnection, policy: AddressPolicy, resolve?: Resolve): Promise<WalletConnection> {
  const faults = await Promise.all(
    conn.relays.map((relay) =>
      checkWebhookUrl(relay, policy, resolve, ['wss:', 'ws:']).then(
        () => undefined,
        (err: unknown) => {
          if (!(err instanceof UrlNotAllowed)) throw err;
          return new WalletCheckError(`The relay ${new URL(relay).host} cannot be used: it ${err.message}`);
        },
      ),
    ),
  );
  const relays = conn.relays.filter((_, i) => !faults[i]);
  if (!relays.length) throw faults[0]!;
  return { ...conn, relays };
}

/**
 * The NIP-47 client: a fresh relay pool per operation (a payment is rare; a pool kept open would need
 * reconnect and idle handling for nothing). Nostr timestamps are wall-clock time, never the DEV_MODE test
 * clock: relays and wallets judge them against their own clocks.
 */
export class Nip47Client {
  constructor(
    private readonly o: {
      infoTimeoutMs: number;
      replyTimeoutMs: number;
      /** NWC_ALLOW_PRIVATE_RELAYS: relays may be loopback / private addresses (local development, tests). */
      relays: AddressPolicy;
      resolve?: Resolve;
    },
  ) {}

  /**
   * Parses the string and reads the wallet's info event within the info timeout; the wallet must offer
   * pay_invoice in an encryption we speak. Throws ConnectionStringError or WalletCheckError (sentences).
   */
  async validate(connectionString: string): Promise<{ conn: WalletConnection; encryption: Encryption }> {
    const conn = await usableRelays(parseConnectionString(connectionString), this.o.relays, this.o.resolve);
    const pool = relayPool();
    const started = Date.now();
    try {
      const { events, reasons } = await new Promise<{ events: Event[]; reasons: string[] }>((resolve) => {
        const events: Event[] = [];
        pool.subscribeEose(
          conn.relays,
          { kinds: [INFO_KIND], authors: [conn.pubkey] },
          {
            maxWait: this.o.infoTimeoutMs,
            onevent: (e) => events.push(e),
            onclose: (r) => resolve({ events, reasons: r.map((x) => x.reason) }),
          },
        );
      });
      const info = events.filter((e) => e.kind === INFO_KIND && e.pubkey === conn.pubkey).sort((a, b) => b.created_at - a.created_at)[0];
      if (!info) {
        const unreachable = reasons.length > 0 && reasons.every((r) => !/eose/i.test(r));
        if (unreachable) throw new WalletCheckError(`Could not connect to the wallet's relay${conn.relays.length > 1 ? 's' : ''}`);
        // Every relay said it has nothing, before the deadline: the wallet never published its capabilities there.
        if (Date.now() - started < this.o.infoTimeoutMs - 250) {
          throw new WalletCheckError(
            'The wallet has published no NIP-47 info event on its relays; check that the wallet service is running and the connection string is current',
          );
        }
        throw new WalletCheckError(`The wallet did not answer on any relay within ${seconds(this.o.infoTimeoutMs)}`);
      }
      const { methods, encryption } = readInfoEvent(info);
      if (!methods.includes('pay_invoice'))
        throw new WalletCheckError('This wallet connection does not allow paying invoices (pay_invoice); create a connection with payment permission');
      if (!encryption) throw new WalletCheckError('The wallet offers no encryption this service speaks (NIP-44 v2 or NIP-04)');
      return { conn, encryption };
    } finally {
      pool.destroy();
    }
  }

  /**
   * Sends one pay_invoice request (kind 23194) and waits for the wallet's answer (kind 23195 naming the
   * request) within the reply timeout. The subscription for the answer is open before the request goes
   * out: requests and answers are ephemeral kinds, relays do not keep them. An error answer after which
   * the wallet may still pay (MAY_PAY_LATER) is held for SECOND_ANSWER_MS in case a success follows. Never throws: every failure is a NIP-47 error (a timeout
   * or an unreadable answer is OTHER).
   */
  async payInvoice(c: PayingConnection, invoice: string): Promise<PayResult> {
    const sk = Buffer.from(c.secret, 'hex');
    const conversationKey = c.encryption === 'nip44_v2' ? nip44.getConversationKey(sk, c.pubkey) : undefined;
    const encrypt = (text: string) => (conversationKey ? nip44.encrypt(text, conversationKey) : nip04.encrypt(sk, c.pubkey, text));
    const decrypt = (text: string) => (conversationKey ? nip44.decrypt(text, conversationKey) : nip04.decrypt(sk, c.pubkey, text));
    const now = Math.floor(Date.now() / 1000);
    const request = finalizeEvent(
      {
        kind: REQUEST_KIND,
        created_at: now,
        // The wallet must not pay a request we stopped waiting for (NIP-40 expiration).
        tags: [
          ['p', c.pubkey],
          ['expiration', String(now + Math.ceil(this.o.replyTimeoutMs / 1000))],
          ...(conversationKey ? [['encryption', 'nip44_v2']] : []),
        ],
        content: encrypt(JSON.stringify({ method: 'pay_invoice', params: { invoice } })),
      },
      sk,
    );
    const fail = (code: NWCErrorCode, message: string, unsent = false): PayResult => ({ error: { code, message }, ...(unsent ? { unsent: true } : {}) });
    const pool = relayPool();
    try {
      return await new Promise<PayResult>((resolve) => {
        const timer = setTimeout(
          () => done(refusal ?? fail('OTHER', `The wallet did not answer the payment request within ${seconds(this.o.replyTimeoutMs)}`)),
          this.o.replyTimeoutMs,
        );
        // A wallet may answer an error and then pay the same request (and answer again): such an error
        // (mayPayLater) is final only once SECOND_ANSWER_MS passed without a preimage.
        let refusal: PayResult | undefined;
        let refusalTimer: NodeJS.Timeout | undefined;
        const done = (r: PayResult) => {
          clearTimeout(timer);
          clearTimeout(refusalTimer);
          resolve(r);
        };
        // Whether a relay took the request. Not sent only when no relay could be reached: one that did not
        // confirm in time (or dropped after the request) may have passed it on, and the wallet pay it later.
        let taken: Promise<'taken' | 'unsent' | 'unknown'> | undefined;
        const send = () => {
          if (taken) return;
          taken = Promise.any(pool.publish(c.relays, request)).then(
            () => 'taken' as const,
            (err: AggregateError) => (err.errors.every(notSent) ? ('unsent' as const) : ('unknown' as const)),
          );
          void taken.then((t) => t === 'taken' || done(fail('OTHER', 'No relay of the wallet accepted the payment request', t === 'unsent')));
        };
        pool.subscribe(
          c.relays,
          { kinds: [RESPONSE_KIND], authors: [c.pubkey], '#e': [request.id] },
          {
            oneose: send,
            // Every relay closed. A relay that cannot be reached ends its wait for stored events too,
            // which sends the request: the wallet was not asked only if no relay could be reached (found
            // from outside: an unreachable relay was announced as a wallet asked, that might still pay).
            onclose: () => {
              if (refusal) return done(refusal);
              void (taken ?? Promise.resolve('unsent')).then((t) => done(fail('OTHER', "Could not connect to the wallet's relays", t === 'unsent')));
            },
            onevent: (e) => {
              if (e.pubkey !== c.pubkey || !e.tags.some((t) => t[0] === 'e' && t[1] === request.id)) return;
              const answer = readAnswer(e, decrypt);
              if ('preimage' in answer || !mayPayLater(answer.error.code)) return done(answer);
              if (refusal) return;
              refusal = answer;
              refusalTimer = setTimeout(() => done(answer), SECOND_ANSWER_MS);
            },
          },
        );
      });
    } finally {
      pool.destroy();
    }
  }
}

/** A publish that never reached its relay (nostr-tools' reasons): no connection, or the relay skipped. */
const notSent = (reason: unknown): boolean => typeof reason === 'string' && /^(connection failure|connection skipped|duplicate url)/.test(reason);

/** The wallet's answer as a result: a preimage, or its NIP-47 error (unknown codes become OTHER). */
function readAnswer(e: Event, decrypt: (s: string) => string): PayResult {
  // biome-ignore lint/suspicious/noExplicitAny: the wallet's JSON, checked field by field below.
  let body: any;
  try {
    body = JSON.parse(decrypt(e.content));
  } catch {
    return { error: { code: 'OTHER', message: 'The wallet sent an answer that could not be decrypted or read' } };
  }
  if (body?.error) {
    const code = NWC_ERROR_CODES.safeParse(body.error.code);
    const message = typeof body.error.message === 'string' && body.error.message ? clipMessage(body.error.message) : 'The wallet refused the payment';
    return { error: { code: code.success ? code.data : 'OTHER', message } };
  }
  const preimage = body?.result?.preimage;
  if (typeof preimage === 'string' && /^[0-9a-fA-F]{64}$/.test(preimage)) return { preimage: preimage.toLowerCase() };
  return { error: { code: 'OTHER', message: 'The wallet answered without a payment preimage' } };
}
