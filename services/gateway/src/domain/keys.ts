import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

/** 32 random bytes as hex, as LNbits keys are. */
export const generateKey = () => randomBytes(32).toString('hex');

/** Keys are high-entropy random strings, so a plain SHA-256 is a safe one-way store and an indexable lookup. */
export const hashSecret = (secret: string) => hash('sha256', secret, 'hex');

export function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && timingSafeEqual(x, y);
}

export type Role = 'admin' | 'invoice';

/** Which role a presented key has on the wallet it was found on, compared in constant time. */
export function roleOf(hash: string, wallet: { admin_key_hash: string; invoice_key_hash: string }): Role | undefined {
  if (sameHash(hash, wallet.admin_key_hash)) return 'admin';
  if (sameHash(hash, wallet.invoice_key_hash)) return 'invoice';
  return undefined;
}
