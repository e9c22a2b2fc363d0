import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** A key's id: the first 8 hex characters of its SHA-256 (names the key, reveals nothing of it). */
export const keyId = (key: Buffer) => createHash('sha256').update(key).digest('hex').slice(0, 8);

function parseKey(hex: string): Buffer {
  const key = Buffer.from(hex, 'hex');
  if (key.length !== 32) throw new Error('SECRETS_KEY must be 32 bytes of hex (64 characters)');
  return key;
}

/**
 * AES-256-GCM for secrets that must be shown or used again later (portal tokens, NWC secrets, webhook
 * signing secrets). Output: `<key id>.<base64 of iv | tag | ciphertext>`; values sealed before key ids
 * existed (no `<key id>.`) are opened with each known key in turn.
 *
 * Rotation: the new key becomes SECRETS_KEY and the old one goes into SECRETS_KEY_PREVIOUS, so both open;
 * new values are sealed with the new key, and `reseal` (libs/runtime/dist/cli/reseal.js) re-seals the
 * stored ones, after which the old key can be dropped.
 */
export class SecretBox {
  private readonly key: Buffer;
  readonly keyId: string;
  private readonly keys = new Map<string, Buffer>();

  /** `previous`: comma-separated older keys (SECRETS_KEY_PREVIOUS) that still open what they sealed. */
  constructor(hexKey: string, previous?: string) {
    this.key = parseKey(hexKey);
    this.keyId = keyId(this.key);
    this.keys.set(this.keyId, this.key);
    for (const hex of (previous ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)) {
      const k = parseKey(hex);
      this.keys.set(keyId(k), k);
    }
  }

  seal(plain: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return `${this.keyId}.${Buffer.concat([iv, c.getAuthTag(), body]).toString('base64')}`;
  }

  open(sealed: string): string {
    const dot = sealed.indexOf('.');
    if (dot < 0) {
      // Sealed before key ids: whichever key opens it (GCM's tag proves the right one).
      for (const key of this.keys.values()) {
        try {
          return decrypt(key, sealed);
        } catch {
          /* the next key */
        }
      }
      throw new Error('sealed value opens with no known key (SECRETS_KEY, SECRETS_KEY_PREVIOUS)');
    }
    const id = sealed.slice(0, dot);
    const key = this.keys.get(id);
    if (!key) throw new Error(`sealed with key ${id}, which is neither SECRETS_KEY nor in SECRETS_KEY_PREVIOUS`);
    return decrypt(key, sealed.slice(dot + 1));
  }

  /**
   * A MAC (HMAC-SHA256, base64url) of `message` for one purpose: the key is derived per purpose, so a
   * value signed for one use is never valid for another, and SECRETS_KEY itself never signs anything.
   */
  sign(purpose: string, message: string): string {
    return mac(this.key, purpose, message).toString('base64url');
  }

  /** Whether `signature` is `sign(purpose, message)` under SECRETS_KEY or a previous key (links outlive a rotation). */
  verify(purpose: string, message: string, signature: string): boolean {
    const given = Buffer.from(signature, 'base64url');
    if (given.length !== 32 || given.toString('base64url') !== signature) return false;
    for (const key of this.keys.values()) if (timingSafeEqual(given, mac(key, purpose, message))) return true;
    return false;
  }

  /** True when the value is not sealed with the current key (a rotation leaves it to `reseal`). */
  isStale(sealed: string): boolean {
    return !sealed.startsWith(`${this.keyId}.`);
  }
}

function mac(key: Buffer, purpose: string, message: string): Buffer {
  const derived = createHmac('sha256', key).update(`purpose:${purpose}`).digest();
  return createHmac('sha256', derived).update(message).digest();
}

function decrypt(key: Buffer, b64: string): string {
  const raw = Buffer.from(b64, 'base64');
  const d = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12));
  d.setAuthTag(raw.subarray(12, 28));
  return Buffer.concat([d.update(raw.subarray(28)), d.final()]).toString('utf8');
}
