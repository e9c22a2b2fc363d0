import { bech32 } from '@scure/base';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { decode } from 'light-bolt11-decoder';
import { describe, expect, it } from 'vitest';
import { bolt11SigningDigest, encodeAmount, encodeBolt11, MAX_DESCRIPTION_BYTES, readBolt11 } from '../src/providers/bolt11.js';
import { DevLightningProvider } from '../src/providers/dev.js';

const section = (inv: ReturnType<typeof decode>, name: string): any => (inv.sections.find((s) => s.name === name) as { value?: unknown } | undefined)?.value;

/** The node key the invoice's signature recovers to (BOLT11: r||s then the recovery id, over sha256(hrp || data)). */
function recoveredPubkey(invoice: string): string {
  const { digest, signature } = bolt11SigningDigest(invoice);
  const noble = new Uint8Array([signature[64]!, ...signature.subarray(0, 64)]);
  return Buffer.from(secp256k1.recoverPublicKey(noble, digest, { prehash: false })).toString('hex');
}

describe('BOLT11 amount', () => {
  it('uses the shortest exact multiplier', () => {
    expect(encodeAmount(1)).toBe('10n');
    expect(encodeAmount(21_000)).toBe('210u');
    expect(encodeAmount(250_000)).toBe('2500u');
    expect(encodeAmount(100_000)).toBe('1m');
    expect(encodeAmount(100_000_000)).toBe('1');
    expect(encodeAmount(123_456_789)).toBe('1234567890n');
    expect(() => encodeAmount(0)).toThrow();
    expect(() => encodeAmount(1.5)).toThrow();
  });
});

describe('dev provider invoices', () => {
  const clock = { nowMs: () => 1_700_000_000_000 };
  const dev = new DevLightningProvider(clock, async () => undefined);

  it.each([1, 999, 21_000, 100_000, 100_000_000, 2_100_000_000_000_000])('decode to what was asked (%d sats)', async (sats) => {
    const inv = await dev.createInvoice({ amount_sats: sats, memo: 'Gold monthly', expiry_seconds: 3600 });
    expect(inv.payment_request.startsWith('lnbc')).toBe(true);
    const d = decode(inv.payment_request);
    expect(BigInt(section(d, 'amount'))).toBe(BigInt(sats) * 1000n);
    expect(section(d, 'payment_hash')).toBe(inv.payment_hash);
    expect(inv.provider_ref).toBe(inv.payment_hash);
    expect(section(d, 'description')).toBe('[dev] Gold monthly');
    expect(section(d, 'timestamp')).toBe(1_700_000_000);
    expect(section(d, 'expiry')).toBe(3600);
    expect(inv.expires_at).toBe(1_700_000_000 + 3600);
    expect(section(d, 'min_final_cltv_expiry')).toBe(18);
    expect(section(d, 'payment_secret')).toMatch(/^[0-9a-f]{64}$/);
    const features = section(d, 'feature_bits');
    expect(features.var_onion_optin).toBe('required');
    expect(features.payment_secret).toBe('required');
    expect(recoveredPubkey(inv.payment_request)).toBe(Buffer.from(dev.nodePubkey).toString('hex'));
  });

  it('signs with one node key per process and a fresh payment hash per invoice', async () => {
    const a = await dev.createInvoice({ amount_sats: 10, memo: 'a', expiry_seconds: 60 });
    const b = await dev.createInvoice({ amount_sats: 10, memo: 'a', expiry_seconds: 60 });
    expect(a.payment_hash).not.toBe(b.payment_hash);
    expect(recoveredPubkey(a.payment_request)).toBe(recoveredPubkey(b.payment_request));
    const other = new DevLightningProvider(clock, async () => undefined);
    const c = await other.createInvoice({ amount_sats: 10, memo: 'a', expiry_seconds: 60 });
    expect(recoveredPubkey(c.payment_request)).not.toBe(recoveredPubkey(a.payment_request));
  });

  it('a tampered invoice no longer recovers to the node key', async () => {
    const inv = await dev.createInvoice({ amount_sats: 1000, memo: 'x', expiry_seconds: 60 });
    // Same data, another amount in the human-readable part: re-checksum so only the signature can tell.
    const { bech32 } = await import('@scure/base');
    const { words } = bech32.decode(inv.payment_request as `${string}1${string}`, false);
    const forged = bech32.encode('lnbc1u', words, false);
    expect(section(decode(forged), 'amount')).toBe('100000');
    expect(recoveredPubkey(forged)).not.toBe(Buffer.from(dev.nodePubkey).toString('hex'));
  });

  it('cuts a long memo to the 639 bytes BOLT11 allows, never inside a character', async () => {
    const inv = await dev.createInvoice({ amount_sats: 5, memo: 'é'.repeat(640), expiry_seconds: 60 });
    const desc: string = section(decode(inv.payment_request), 'description');
    expect(Buffer.byteLength(desc)).toBeLessThanOrEqual(MAX_DESCRIPTION_BYTES);
    expect(desc.startsWith('[dev] é')).toBe(true);
    expect(desc).not.toContain('\ufffd');
  });

  it('getStatus says what the payments table says', async () => {
    const statuses: Record<string, string> = { aa: 'paid', bb: 'pending' };
    const p = new DevLightningProvider(clock, async (ref) => statuses[ref]);
    expect(await p.getStatus('aa')).toEqual({ paid: true });
    expect(await p.getStatus('bb')).toEqual({ paid: false });
    expect(await p.getStatus('cc')).toEqual({ paid: false });
  });

  it('encodes a known payment hash exactly', () => {
    const hash = sha256(new Uint8Array(32));
    const inv = encodeBolt11(
      {
        amount_sats: 2500,
        timestamp: 1_496_314_658,
        payment_hash: hash,
        payment_secret: new Uint8Array(32).fill(0x11),
        description: '1 cup coffee',
        expiry_seconds: 60,
      },
      secp256k1.utils.randomSecretKey(),
    );
    expect(inv.startsWith('lnbc25u1pvjluez')).toBe(true); // BOLT11's own example prefix and timestamp
    expect(section(decode(inv), 'payment_hash')).toBe(Buffer.from(hash).toString('hex'));
  });
});

describe('readBolt11', () => {
  it("reads a provider's invoice: amount in msat and payment hash, as a decoder does", () => {
    const hash = sha256(new TextEncoder().encode('read me'));
    for (const sats of [1, 21, 2500, 100_000, 123_456_789, 300_000_000]) {
      const inv = encodeBolt11(
        { amount_sats: sats, timestamp: 1_700_000_000, payment_hash: hash, payment_secret: new Uint8Array(32).fill(7), description: 'x', expiry_seconds: 60 },
        secp256k1.utils.randomSecretKey(),
      );
      expect(readBolt11(inv)).toEqual({ msat: BigInt(sats) * 1000n, payment_hash: Buffer.from(hash).toString('hex') });
      expect(BigInt(section(decode(inv), 'amount') as string)).toBe(BigInt(sats) * 1000n);
      expect(readBolt11(inv.toUpperCase())?.msat).toBe(BigInt(sats) * 1000n);
    }
    // BOLT11's own examples: any amount (no amount in the prefix), and 2500u, 20m, 10 pico-BTC (1 msat).
    expect(
      readBolt11(
        'lnbc1pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypqdpl2pkx2ctnv5sxxmmwwd5kgetjypeh2ursdae8g6twvus8g6rfwvs8qun0dfjkxaq8rkx3yf5tcsyz3d73gafnh3cax9rn449d9p5uxz9ezhhypd0elx87sjle52x86fux2ypatgddc6k63n7erqz25le42c4u4ecky03ylcqca784w',
      )?.msat,
    ).toBeNull();
    // Pico amounts, by hand (the encoder never writes them): 10p is 1 msat; 25p is no whole msat (invalid).
    const { words } = bech32.decode(
      encodeBolt11(
        { amount_sats: 1, timestamp: 1_700_000_000, payment_hash: hash, payment_secret: new Uint8Array(32), description: 'p', expiry_seconds: 60 },
        secp256k1.utils.randomSecretKey(),
      ) as `${string}1${string}`,
      false,
    );
    expect(readBolt11(bech32.encode('lnbc10p', words, false))?.msat).toBe(1n);
    expect(readBolt11(bech32.encode('lnbc2500000p', words, false))?.msat).toBe(250_000n);
    expect(readBolt11(bech32.encode('lnbc25p', words, false))).toBeUndefined();
    // Two `p` fields: the first is the one a payer's wallet reads, and the one read here.
    const other = bech32.toWords(sha256(new TextEncoder().encode('other')));
    const twoHashes = [...words.slice(0, 7), 1, 1, 20, ...other, ...words.slice(7)];
    expect(readBolt11(bech32.encode('lnbc10n', twoHashes, false))?.payment_hash).toBe(Buffer.from(sha256(new TextEncoder().encode('other'))).toString('hex'));
    expect(readBolt11('not an invoice')).toBeUndefined();
    expect(readBolt11('bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq')).toBeUndefined();
  });
});
