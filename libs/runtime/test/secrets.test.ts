import { createCipheriv, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { SecretBox } from '../src/secrets.js';

const OLD = 'ab'.repeat(32);
const NEW = 'cd'.repeat(32);

/** A value as SecretBox sealed it before key ids (base64 of iv | tag | ciphertext). */
function legacySeal(hex: string, plain: string): string {
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', Buffer.from(hex, 'hex'), iv);
  const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
  return Buffer.concat([iv, c.getAuthTag(), body]).toString('base64');
}

describe('SecretBox with key ids', () => {
  it('names the key in each sealed value and opens it again', () => {
    const box = new SecretBox(OLD);
    const sealed = box.seal('whsec_secret');
    expect(sealed.startsWith(`${box.keyId}.`)).toBe(true);
    expect(box.keyId).toMatch(/^[0-9a-f]{8}$/);
    expect(sealed).not.toContain('whsec_secret');
    expect(box.open(sealed)).toBe('whsec_secret');
    expect(box.isStale(sealed)).toBe(false);
  });

  it('after a rotation opens values of the previous key, seals with the new one, and marks the old ones stale', () => {
    const before = new SecretBox(OLD).seal('token');
    const rotated = new SecretBox(NEW, OLD);
    expect(rotated.open(before)).toBe('token');
    expect(rotated.isStale(before)).toBe(true);
    const after = rotated.seal('token');
    expect(rotated.isStale(after)).toBe(false);
    expect(new SecretBox(NEW).open(after)).toBe('token');
    // Without the previous key the old value names a key nobody has.
    expect(() => new SecretBox(NEW).open(before)).toThrow(/neither SECRETS_KEY nor in SECRETS_KEY_PREVIOUS/);
  });

  it('opens values sealed before key ids with whichever known key sealed them', () => {
    const legacy = legacySeal(OLD, 'portal-token');
    expect(new SecretBox(NEW, OLD).open(legacy)).toBe('portal-token');
    expect(new SecretBox(NEW, OLD).isStale(legacy)).toBe(true);
    expect(() => new SecretBox(NEW).open(legacy)).toThrow(/no known key/);
  });

  it('refuses a key of the wrong length', () => {
    expect(() => new SecretBox('abcd')).toThrow(/32 bytes/);
    expect(() => new SecretBox(NEW, 'abcd')).toThrow(/32 bytes/);
  });
});
