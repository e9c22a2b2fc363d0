import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/**
 * `<prefix><26 chars>`: 48 bits of milliseconds then 80 random bits, Crockford base32, so ids sort by
 * creation time and serve as the stable tie-break of newest-first lists.
 */
export function newId(prefix: string, nowMs = Date.now()): string {
  const bytes = Buffer.alloc(16);
  bytes.writeUIntBE(nowMs, 0, 6);
  randomBytes(10).copy(bytes, 6);
  let bits = 0n;
  for (const b of bytes) bits = (bits << 8n) | BigInt(b);
  let out = '';
  for (let i = 0; i < 26; i++) {
    out = ALPHABET[Number(bits & 31n)] + out;
    bits >>= 5n;
  }
  return prefix + out;
}
