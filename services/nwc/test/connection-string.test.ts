import { describe, expect, it } from 'vitest';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { ConnectionStringError, parseConnectionString } from '../src/connection-string.js';
import { Nip47Client, readInfoEvent, usableRelays, WalletCheckError } from '../src/nip47.js';

const walletPk = getPublicKey(generateSecretKey());
const secret = Buffer.from(generateSecretKey()).toString('hex');
const str = (q: string, pk = walletPk) => `nostr+walletconnect://${pk}?${q}`;
const relay = (u: string) => `relay=${encodeURIComponent(u)}`;

function refused(s: string): string {
  try {
    parseConnectionString(s);
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectionStringError);
    return (err as Error).message;
  }
  throw new Error(`accepted: ${s}`);
}

describe('NWC connection string', () => {
  it('parses the wallet pubkey, every relay, the secret and lud16', () => {
    const c = parseConnectionString(str(`${relay('wss://relay.one/')}&${relay('wss://relay.two')}&secret=${secret}&lud16=me%40example.com`));
    expect(c).toEqual({ pubkey: walletPk, relays: ['wss://relay.one/', 'wss://relay.two'], secret, lud16: 'me@example.com' });
  });

  it('accepts ws:// to this machine only', () => {
    for (const host of ['127.0.0.1:7000', 'localhost:7000', '[::1]:7000', '127.1.2.3']) {
      expect(parseConnectionString(str(`${relay(`ws://${host}`)}&secret=${secret}`)).relays).toEqual([`ws://${host}`]);
    }
    expect(refused(str(`${relay('ws://relay.example.com')}&secret=${secret}`))).toBe('The relay relay.example.com uses unencrypted ws://; use a wss:// relay');
    expect(refused(str(`${relay('ws://10.0.0.5:7000')}&secret=${secret}`))).toMatch(/unencrypted ws:\/\//);
    // At least one usable relay (behaviour.md): the others are left out, never contacted (found in review:
    // a string with one good relay was refused whole).
    expect(parseConnectionString(str(`${relay('wss://ok.example')}&${relay('ws://bad.example')}&secret=${secret}`)).relays).toEqual(['wss://ok.example']);
    expect(
      parseConnectionString(str(`${relay('https://no.example')}&${relay('wss://u:p@x.example')}&${relay('ws://127.0.0.1:7000')}&secret=${secret}`)).relays,
    ).toEqual(['ws://127.0.0.1:7000']);
    // None usable: the first one's fault.
    expect(refused(str(`${relay('ws://bad.example')}&${relay('https://no.example')}&secret=${secret}`))).toMatch(/bad\.example uses unencrypted/);
  });

  it('refuses a wrong scheme, bad keys, a missing or repeated secret, no relay, non-WebSocket relays', () => {
    expect(refused(`nostr+wallet://${walletPk}?${relay('wss://r.example')}&secret=${secret}`)).toBe(
      'The connection string must start with nostr+walletconnect://',
    );
    for (const empty of ['', ' \n']) expect(refused(empty)).toMatch(/^The connection string is empty/);
    expect(refused(str(`${relay('wss://r.example')}&secret=${secret}`, walletPk.slice(2)))).toBe(
      'The wallet public key in the connection string must be 64 hexadecimal characters',
    );
    expect(refused(str(`${relay('wss://r.example')}&secret=${secret}`, `${walletPk.slice(1)}g`))).toMatch(/64 hexadecimal/);
    // 64 hex characters, but no point on the curve has this x coordinate (p + 1 is above the field).
    expect(refused(str(`${relay('wss://r.example')}&secret=${secret}`, 'f'.repeat(64)))).toBe(
      'The wallet public key in the connection string is not a valid key',
    );
    expect(refused(str(`${relay('wss://r.example')}&secret=${secret.slice(1)}`))).toBe('The secret in the connection string must be 64 hexadecimal characters');
    expect(refused(str(`${relay('wss://r.example')}&secret=${'0'.repeat(64)}`))).toBe('The secret in the connection string is not a valid key');
    expect(refused(str(`${relay('wss://r.example')}`))).toBe('The connection string must contain exactly one secret');
    expect(refused(str(`${relay('wss://r.example')}&secret=${secret}&secret=${secret}`))).toBe('The connection string must contain exactly one secret');
    expect(refused(str(`secret=${secret}`))).toBe('The connection string names no relay');
    expect(refused(str(`${relay('https://r.example')}&secret=${secret}`))).toBe('The relay "https://r.example" is not a wss:// WebSocket URL');
    expect(refused(str(`relay=nonsense&secret=${secret}`))).toMatch(/is not a valid URL/);
  });

  it('never repeats the secret in a refusal', () => {
    const msg = refused(str(`${relay('ws://evil.example')}&secret=${secret}`));
    expect(msg).not.toContain(secret);
  });
});

describe('NIP-47 info event', () => {
  it('reads methods and prefers NIP-44 v2; no encryption tag means NIP-04 only', () => {
    expect(readInfoEvent({ content: 'pay_invoice get_balance', tags: [['encryption', 'nip44_v2 nip04']] })).toEqual({
      methods: ['pay_invoice', 'get_balance'],
      encryption: 'nip44_v2',
    });
    expect(readInfoEvent({ content: 'pay_invoice', tags: [] })).toEqual({ methods: ['pay_invoice'], encryption: 'nip04' });
    expect(readInfoEvent({ content: 'pay_invoice', tags: [['encryption', 'nip04']] }).encryption).toBe('nip04');
    expect(readInfoEvent({ content: 'pay_invoice', tags: [['encryption', 'nip99']] }).encryption).toBeUndefined();
  });
});

describe('relay addresses', () => {
  // The check happens before any connection: none of these hosts is ever contacted.
  const resolve = async (host: string) =>
    ({ 'relay.internal.example': ['10.0.0.9'], 'mixed.example': ['93.184.216.34', '192.168.1.2'], 'public.example': ['93.184.216.34'] })[host] ?? [];
  const client = (allowPrivate: boolean) => new Nip47Client({ infoTimeoutMs: 200, replyTimeoutMs: 200, relays: { allowPrivate }, resolve });

  it.each([
    ['wss://10.1.2.3', /private, loopback or link-local address \(10\.1\.2\.3\)/],
    ['ws://127.0.0.1:7777', /127\.0\.0\.1/],
    ['wss://[::1]:7777', /::1/],
    // A sentence (behaviour.md: errors are human sentences), not "it host … resolves".
    ['wss://relay.internal.example', /cannot be used: it names host relay\.internal\.example, which resolves to a private.*10\.0\.0\.9/],
    ['wss://mixed.example', /192\.168\.1\.2/],
    ['wss://nowhere.example', /it names host nowhere\.example, which does not resolve/],
  ])('refuses %s unless private relays are allowed', async (url, why) => {
    const err = await client(false)
      .validate(str(`${relay(url)}&secret=${secret}`))
      .then(
        () => undefined,
        (e) => e,
      );
    expect(err).toBeInstanceOf(WalletCheckError);
    expect(err.message).toMatch(/^The relay .* cannot be used: it /);
    expect(err.message).toMatch(why);
  });

  it('leaves out a relay at a private address when another can be used; none usable: the first one says why', async () => {
    const conn = (relays: string[]) => parseConnectionString(str(`${relays.map(relay).join('&')}&secret=${secret}`));
    // Only looked up (the resolver above), never connected to.
    const used = await usableRelays(conn(['wss://10.1.2.3', 'wss://public.example', 'wss://relay.internal.example']), { allowPrivate: false }, resolve);
    expect(used.relays).toEqual(['wss://public.example']);
    const err = await usableRelays(conn(['wss://10.1.2.3', 'wss://relay.internal.example']), { allowPrivate: false }, resolve).then(
      () => undefined,
      (e) => e,
    );
    expect(err).toBeInstanceOf(WalletCheckError);
    expect(err.message).toMatch(/^The relay 10\.1\.2\.3 cannot be used: it /);
  });

  it('refuses a string naming more relays than a wallet would', () => {
    const many = Array.from({ length: 11 }, (_, i) => relay(`wss://r${i}.example`)).join('&');
    expect(refused(str(`${many}&secret=${secret}`))).toBe('The connection string names 11 relays; it may name at most 10');
  });

  it('with private relays allowed, a loopback relay is tried (here nobody listens)', async () => {
    const err = await client(true)
      .validate(str(`${relay('ws://127.0.0.1:9')}&secret=${secret}`))
      .then(
        () => undefined,
        (e) => e,
      );
    expect(err).toBeInstanceOf(WalletCheckError);
    expect(err.message).not.toMatch(/cannot be used/);
  });
});
