import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

// Random bytes are drawn 8 KiB at a time (as Node does for randomUUID): one call into the CSPRNG per id
// was 2-5% of a service's CPU in a renewal sweep. Each byte is handed out once.
const pool = Buffer.alloc(8192);
let poolAt = pool.length;

function random10(into: Buffer, at: number): void {
  if (poolAt + 10 > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  pool.copy(into, at, poolAt, poolAt + 10);
  poolAt += 10;
}

/**
 * `<prefix><26 chars>`: 48 bits of milliseconds then 80 random bits, Crockford base32, so ids sort by
 * creation time and serve as the stable tie-break of newest-first lists.
 */
export function newId(prefix: string, nowMs = Date.now()): string {
  const bytes = Buffer.alloc(16);
  bytes.writeUIntBE(nowMs, 0, 6);
  random10(bytes, 6);
  // 26 characters of 5 bits hold 130 bits: the 128 of the id behind two zero bits.
  let out = prefix;
  for (let i = 0; i < 26; i++) {
    let v = 0;
    for (let b = i * 5 - 2; b < i * 5 + 3; b++) {
      v = (v << 1) | (b < 0 ? 0 : (bytes[b >> 3]! >> (7 - (b & 7))) & 1);
    }
    out += ALPHABET[v];
  }
  return out;
}

/** The milliseconds newId wrote into `id` (its first 48 bits), or null for an id not of that form. */
export function idTimeMs(id: string, prefix: string): number | null {
  if (!id.startsWith(prefix) || id.length !== prefix.length + 26) return null;
  let ms = 0;
  // Characters 0-9 hold the 2 zero bits and the 48 bits of time: 50 bits, exact in a double.
  for (let i = 0; i < 10; i++) {
    const v = ALPHABET.indexOf(id[prefix.length + i]!);
    if (v < 0) return null;
    ms = ms * 32 + v;
  }
  return ms;
}
