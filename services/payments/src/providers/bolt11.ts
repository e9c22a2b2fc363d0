import { signRecoverable } from 'tiny-secp256k1';
import { sha256 } from '@noble/hashes/sha2.js';
import { bech32 } from '@scure/base';

/**
 * A BOLT11 encoder, enough for the dev provider to issue invoices any wallet or decoder accepts: mainnet
 * `lnbc`, the amount in the shortest multiplier form, tagged fields p, s, d, x, c and 9 (features:
 * var_onion_optin and payment_secret, both required, as every current node writes them), signed with a
 * recoverable secp256k1 signature.
 */
interface Bolt11Fields {
  amount_sats: number;
  /** Unix seconds. */
  timestamp: number;
  payment_hash: Uint8Array;
  payment_secret: Uint8Array;
  description: string;
  expiry_seconds: number;
  min_final_cltv_expiry?: number;
}

const TAG = { p: 1, s: 16, d: 13, x: 6, c: 24, features: 5 } as const;
/** The `d` field's length is 10 bits of 5-bit words: at most 1023 words, 639 whole bytes. */
export const MAX_DESCRIPTION_BYTES = 639;
const MAX_SATS = 2_100_000_000_000_000;

/** `<amount><multiplier>` of the human-readable part, the shortest exact form (no multiplier = whole BTC). */
export function encodeAmount(sats: number): string {
  if (!Number.isSafeInteger(sats) || sats <= 0 || sats > MAX_SATS) throw new Error(`amount ${sats} sats is out of range`);
  const s = BigInt(sats);
  if (s % 100_000_000n === 0n) return `${s / 100_000_000n}`;
  if (s % 100_000n === 0n) return `${s / 100_000n}m`;
  if (s % 100n === 0n) return `${s / 100n}u`;
  return `${s * 10n}n`;
}

/** Big-endian 5-bit words of a non-negative integer, without leading zeros (at least one word). */
function intWords(n: number, minWords = 1): number[] {
  const out: number[] = [];
  let v = BigInt(n);
  while (v > 0n) {
    out.unshift(Number(v & 31n));
    v >>= 5n;
  }
  while (out.length < minWords) out.unshift(0);
  return out;
}

function field(tag: number, words: number[]): number[] {
  if (words.length > 1023) throw new Error(`tagged field ${tag} is too long`);
  return [tag, words.length >> 5, words.length & 31, ...words];
}

/** 5-bit words to bytes, zero bits appended to the next byte boundary (what BOLT11 signs). */
function wordsToPaddedBytes(words: number[]): Uint8Array {
  const out: number[] = [];
  let acc = 0;
  let bits = 0;
  for (const w of words) {
    acc = (acc << 5) | w;
    bits += 5;
    while (bits >= 8) {
      bits -= 8;
      out.push((acc >> bits) & 0xff);
    }
    acc &= (1 << bits) - 1;
  }
  if (bits > 0) out.push((acc << (8 - bits)) & 0xff);
  return Uint8Array.from(out);
}

/** Cuts a string to at most `max` UTF-8 bytes without splitting a character. */
function truncateUtf8(s: string, max: number): string {
  let out = '';
  let used = 0;
  for (const ch of s) {
    const n = Buffer.byteLength(ch);
    if (used + n > max) break;
    out += ch;
    used += n;
  }
  return out;
}

export function encodeBolt11(f: Bolt11Fields, nodeKey: Uint8Array): string {
  if (f.payment_hash.length !== 32 || f.payment_secret.length !== 32) throw new Error('payment hash and secret are 32 bytes');
  const hrp = `lnbc${encodeAmount(f.amount_sats)}`;
  const description = new TextEncoder().encode(truncateUtf8(f.description, MAX_DESCRIPTION_BYTES));
  const features = (1 << 8) | (1 << 14); // var_onion_optin (8), payment_secret (14), both required
  const data = [
    ...intWords(f.timestamp, 7).slice(-7),
    ...field(TAG.p, bech32.toWords(f.payment_hash)),
    ...field(TAG.s, bech32.toWords(f.payment_secret)),
    ...field(TAG.d, bech32.toWords(description)),
    ...field(TAG.x, intWords(f.expiry_seconds)),
    ...field(TAG.c, intWords(f.min_final_cltv_expiry ?? 18)),
    ...field(TAG.features, intWords(features)),
  ];
  const digest = sha256(new Uint8Array([...new TextEncoder().encode(hrp), ...wordsToPaddedBytes(data)]));
  // libsecp256k1 (WebAssembly) signs in a third of noble's time: the dev rail signs an invoice per
  // renewal, by the thousand in a sweep. Same RFC 6979 signature; BOLT11 wants r||s then the recovery id.
  const { signature, recoveryId } = signRecoverable(digest, nodeKey);
  const bolt11Sig = new Uint8Array([...signature, recoveryId]);
  return bech32.encode(hrp, [...data, ...bech32.toWords(bolt11Sig)], false);
}

/** The message a BOLT11 signature covers, for verifiers: sha256(hrp bytes || data words padded to bytes). */
export function bolt11SigningDigest(invoice: string): { digest: Uint8Array; signature: Uint8Array } {
  const { prefix, words } = bech32.decode(invoice as `${string}1${string}`, false);
  const data = words.slice(0, -104);
  const sig = bech32.fromWords(words.slice(-104));
  return { digest: sha256(new Uint8Array([...new TextEncoder().encode(prefix), ...wordsToPaddedBytes(data)])), signature: sig };
}

const MULTIPLIER_PICO: Record<string, bigint> = { m: 1_000_000_000n, u: 1_000_000n, n: 1_000n, p: 1n };

/**
 * What a provider's invoice says it charges and for which hash: the amount in millisatoshis (null: an
 * invoice for any amount) and the `p` field. Undefined when it is no BOLT11 invoice.
 */
export function readBolt11(invoice: string): { msat: bigint | null; payment_hash: string | null } | undefined {
  let decoded: { prefix: string; words: number[] };
  try {
    decoded = bech32.decode(invoice.toLowerCase() as `${string}1${string}`, false);
  } catch {
    return undefined;
  }
  const hrp = /^ln(?:bcrt|bc|tbs|tb|sb)(\d+)?([munp])?$/.exec(decoded.prefix);
  if (!hrp) return undefined;
  // Amounts are in BTC times the multiplier; 1 BTC is 10^11 msat, 1 pico-BTC a tenth of a msat (BOLT11:
  // a pico amount that is not a whole msat makes the invoice invalid).
  if (hrp[2] === 'p' && hrp[1] !== undefined && BigInt(hrp[1]) % 10n !== 0n) return undefined;
  const msat = hrp[1] === undefined ? null : hrp[2] ? (BigInt(hrp[1]) * MULTIPLIER_PICO[hrp[2]]!) / 10n : BigInt(hrp[1]) * 100_000_000_000n;
  const data = decoded.words.slice(7, -104);
  let payment_hash: string | null = null;
  for (let i = 0; i + 3 <= data.length; ) {
    const tag = data[i]!;
    const len = (data[i + 1]! << 5) | data[i + 2]!;
    const value = data.slice(i + 3, i + 3 + len);
    // The first `p` field: the one payers' wallets (LND) read; a second must not be what is checked.
    if (tag === TAG.p && len === 52 && payment_hash === null)
      payment_hash =
        Buffer.from(bech32.fromWordsUnsafe(value) ?? [])
          .toString('hex')
          .slice(0, 64) || null;
    i += 3 + len;
  }
  return { msat, payment_hash };
}
