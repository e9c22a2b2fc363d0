import { schnorr } from '@noble/curves/secp256k1.js';

/**
 * 64 hex characters are not yet a key: a public key must be the x of a secp256k1 point, a secret key a
 * scalar in [1, n). Anything else passes a format check and then fails at every use.
 */
export function isNostrPublicKey(hex: string): boolean {
  if (!/^[0-9a-f]{64}$/i.test(hex)) return false;
  try {
    schnorr.utils.lift_x(BigInt(`0x${hex}`));
    return true;
  } catch {
    return false;
  }
}

export function isNostrSecretKey(hex: string): boolean {
  if (!/^[0-9a-f]{64}$/i.test(hex)) return false;
  try {
    schnorr.getPublicKey(Buffer.from(hex, 'hex'));
    return true;
  } catch {
    return false;
  }
}
