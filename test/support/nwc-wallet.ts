import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { decode } from 'light-bolt11-decoder';
import { finalizeEvent, generateSecretKey, getPublicKey, type Event, type EventTemplate } from 'nostr-tools/pure';
import * as nip04 from 'nostr-tools/nip04';
import * as nip44 from 'nostr-tools/nip44';

/** What the wallet does with the next pay_invoice requests. */
export type WalletBehaviour =
  /**
   * `afterPay`: runs once the invoice is paid, before the answer goes out (a service stopped meanwhile).
   * `fakePreimage`: a faulty wallet: it pays nothing and answers a made-up preimage.
   */
  | { pay: true; delayMs?: number; noAnswer?: boolean; afterPay?: () => Promise<void>; fakePreimage?: boolean }
  /**
   * `thenPay`: after the error answer the wallet pays anyway, and says so in a second answer ('answer') or
   * not ('silently'); `thenPayAfterMs` later (a wallet paying after the service looked whether it had).
   */
  | { error: string; message?: string; thenPay?: 'answer' | 'silently'; thenPayAfterMs?: number; delayMs?: number }
  | { silent: true };

export interface WalletRequest {
  client: string;
  /** The request's encryption tag ('nip04' when it has none). */
  encryption: 'nip44_v2' | 'nip04';
  method: string;
  invoice?: string;
  /** What the wallet answered: the preimage or the error code (undefined: nothing). */
  answered?: { preimage: string } | { error: string };
  /** When (Date.now()) the wallet sent its (last) answer to the relay. */
  answeredAt?: number;
}

export interface NwcWallet {
  pubkey: string;
  /** A connection string for a fresh client key (each call a new client). */
  connectionString(): string;
  setBehaviour(b: WalletBehaviour): void;
  requests: WalletRequest[];
  stop(): Promise<void>;
}

/**
 * A NIP-47 wallet service peer speaking the real wire format over a relay: it publishes its info event
 * (kind 13194; methods and `encryption` tag configurable, `encryption: null` for an old NIP-04-only
 * wallet), answers kind 23194 pay_invoice requests of its clients (decrypting with what the request's
 * encryption tag says) by paying the dev invoice through `POST {api}/dev/invoices/{payment_hash}/pay`
 * and replying kind 23195 with the preimage, or with a configured NIP-47 error, or not at all.
 */
export async function startNwcWallet(o: {
  relayUrl: string;
  api: string;
  methods?: string[];
  encryption?: string | null;
  /** false: the wallet never publishes an info event. */
  publishInfo?: boolean;
}): Promise<NwcWallet> {
  const sk = generateSecretKey();
  const pubkey = getPublicKey(sk);
  const clients = new Set<string>();
  const requests: WalletRequest[] = [];
  let behaviour: WalletBehaviour = { pay: true };

  const ws = new WebSocket(o.relayUrl);
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  const waiters = new Map<string, () => void>();
  const sign = (t: Omit<EventTemplate, 'created_at'>) => finalizeEvent({ ...t, created_at: Math.floor(Date.now() / 1000) }, sk);
  const publish = (e: Event) =>
    new Promise<void>((resolve) => {
      waiters.set(e.id, resolve);
      ws.send(JSON.stringify(['EVENT', e]));
    });

  function crypto(enc: 'nip44_v2' | 'nip04', client: string) {
    if (enc === 'nip44_v2') {
      const key = nip44.getConversationKey(sk, client);
      return { enc: (s: string) => nip44.encrypt(s, key), dec: (s: string) => nip44.decrypt(s, key) };
    }
    return { enc: (s: string) => nip04.encrypt(sk, client, s), dec: (s: string) => nip04.decrypt(sk, client, s) };
  }

  async function answer(req: Event): Promise<void> {
    const encryption = req.tags.find((t) => t[0] === 'encryption')?.[1] === 'nip44_v2' ? 'nip44_v2' : 'nip04';
    const c = crypto(encryption, req.pubkey);
    const reply = (body: object) => {
      seen.answeredAt = Date.now();
      return publish(
        sign({
          kind: 23195,
          tags: [
            ['p', req.pubkey],
            ['e', req.id],
          ],
          content: c.enc(JSON.stringify({ result_type: 'pay_invoice', ...body })),
        }),
      );
    };
    const seen: WalletRequest = { client: req.pubkey, encryption, method: '?' };
    requests.push(seen);
    if (!clients.has(req.pubkey)) {
      seen.answered = { error: 'UNAUTHORIZED' };
      return reply({ result: null, error: { code: 'UNAUTHORIZED', message: 'Unknown client' } });
    }
    const body = JSON.parse(c.dec(req.content));
    seen.method = body.method;
    seen.invoice = body.params?.invoice;
    if (body.method !== 'pay_invoice') return reply({ result: null, error: { code: 'NOT_IMPLEMENTED', message: 'Only pay_invoice' } });
    if ('silent' in behaviour) return;
    const b = behaviour;
    if ('error' in b) {
      if (b.delayMs) await new Promise((r) => setTimeout(r, b.delayMs));
      seen.answered = { error: b.error };
      await reply({ result: null, error: { code: b.error, message: b.message ?? `Wallet says ${b.error}` } });
      if (!b.thenPay) return;
      if (b.thenPayAfterMs) await new Promise((r) => setTimeout(r, b.thenPayAfterMs));
      const preimage = await devPay(seen.invoice!);
      if (preimage && b.thenPay === 'answer') {
        seen.answered = { preimage };
        await reply({ result: { preimage }, error: null });
      }
      return;
    }
    if (b.delayMs) await new Promise((r) => setTimeout(r, b.delayMs)); // a wallet asking its user first
    const preimage = b.fakePreimage ? randomBytes(32).toString('hex') : await devPay(seen.invoice!);
    if (!preimage) {
      seen.answered = { error: 'PAYMENT_FAILED' };
      return reply({ result: null, error: { code: 'PAYMENT_FAILED', message: 'dev pay refused' } });
    }
    await b.afterPay?.();
    if (b.noAnswer) return; // paid, but the answer never reaches the relay
    seen.answered = { preimage };
    return reply({ result: { preimage }, error: null });
  }

  /** Pays a dev invoice as a wallet does; its preimage, or undefined when the dev provider refused. */
  async function devPay(invoice: string): Promise<string | undefined> {
    const hash = decode(invoice).sections.find((s) => s.name === 'payment_hash') as { value: string } | undefined;
    const res = await fetch(`${o.api}/dev/invoices/${hash?.value}/pay`, { method: 'POST' });
    if (res.status !== 200) return undefined;
    return ((await res.json()) as { preimage: string }).preimage;
  }

  ws.on('message', (data) => {
    const msg = JSON.parse(String(data));
    if (msg[0] === 'OK') waiters.get(msg[1])?.();
    if (msg[0] === 'EVENT' && msg[1] === 'requests') void answer(msg[2] as Event).catch(() => undefined);
  });

  if (o.publishInfo !== false) {
    const enc = o.encryption === undefined ? 'nip44_v2 nip04' : o.encryption;
    await publish(
      sign({ kind: 13194, content: (o.methods ?? ['pay_invoice', 'get_balance', 'get_info']).join(' '), tags: enc === null ? [] : [['encryption', enc]] }),
    );
  }
  await new Promise<void>((resolve) => {
    const onEose = (data: WebSocket.RawData) => {
      const msg = JSON.parse(String(data));
      if (msg[0] === 'EOSE' && msg[1] === 'requests') {
        ws.off('message', onEose);
        resolve();
      }
    };
    ws.on('message', onEose);
    ws.send(JSON.stringify(['REQ', 'requests', { kinds: [23194], '#p': [pubkey], since: Math.floor(Date.now() / 1000) - 5 }]));
  });

  return {
    pubkey,
    requests,
    connectionString() {
      const secret = generateSecretKey();
      clients.add(getPublicKey(secret));
      return `nostr+walletconnect://${pubkey}?relay=${encodeURIComponent(o.relayUrl)}&secret=${Buffer.from(secret).toString('hex')}`;
    },
    setBehaviour(b) {
      behaviour = b;
    },
    stop: () =>
      new Promise<void>((resolve) => {
        if (ws.readyState === ws.CLOSED) return resolve();
        ws.once('close', () => resolve());
        ws.close();
      }),
  };
}
