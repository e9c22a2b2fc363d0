import { describe, expect, it } from 'vitest';
import { generateKey, hashSecret, roleOf, sameHash } from '../src/domain/keys.js';

describe('keys', () => {
  it('are 32 random bytes in hex, never twice the same', () => {
    const a = generateKey();
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(generateKey()).not.toBe(a);
  });

  it('are stored as SHA-256 and matched to their role', () => {
    const admin = generateKey();
    const invoice = generateKey();
    const wallet = { admin_key_hash: hashSecret(admin), invoice_key_hash: hashSecret(invoice) };
    expect(hashSecret(admin)).toMatch(/^[0-9a-f]{64}$/);
    expect(hashSecret(admin)).not.toContain(admin);
    expect(roleOf(hashSecret(admin), wallet)).toBe('admin');
    expect(roleOf(hashSecret(invoice), wallet)).toBe('invoice');
    expect(roleOf(hashSecret(generateKey()), wallet)).toBeUndefined();
    expect(sameHash('ab', 'abcd')).toBe(false);
  });
});
