import { randomBytes } from 'node:crypto';
import { SecretBox } from '@sb/runtime';
import { describe, expect, it } from 'vitest';
import { readUnsubscribeToken, unsubscribeToken } from '../src/domain/unsubscribe.js';

const hex = () => randomBytes(32).toString('hex');
const SUB = 'sub_01JDZ8Q6ZP7W3X9K2M4N5R6T7V';

describe('one-click unsubscribe tokens', () => {
  it('name the subscription and the kind the server signed, nothing else', () => {
    const box = new SecretBox(hex());
    const token = unsubscribeToken(box, SUB, 'reminders');
    expect(token).toMatch(new RegExp(`^${SUB}\\.reminders\\.[A-Za-z0-9_-]{43}$`));
    expect(readUnsubscribeToken(box, token)).toEqual({ subscriptionId: SUB, kind: 'reminders' });
    const [, , mac] = token.split('.');
    // Another kind or subscription under the same signature, a changed or cut signature, another key.
    for (const bad of [
      `${SUB}.confirmations.${mac}`,
      `sub_other.reminders.${mac}`,
      `${SUB}.reminders.${mac!.slice(0, -1)}${mac!.endsWith('A') ? 'B' : 'A'}`,
      `${SUB}.reminders.${mac!.slice(0, -1)}`,
      `${SUB}.everything.${mac}`,
      `${SUB}.reminders`,
      '',
    ]) {
      expect(readUnsubscribeToken(box, bad), bad).toBeUndefined();
    }
    expect(readUnsubscribeToken(new SecretBox(hex()), token)).toBeUndefined();
  });

  it('have one spelling: the MAC in standard base64, padded or with other unused bits is not the token', () => {
    const box = new SecretBox(hex());
    // A subscription whose MAC has a character base64url spells differently from base64.
    const [sub, mac] = Array.from({ length: 64 }, (_, i) => `${SUB}${i}`)
      .map((s) => [s, unsubscribeToken(box, s, 'reminders').split('.')[2]!] as const)
      .find(([, m]) => /[-_]/.test(m))!;
    // 43 characters carry 258 bits: the last one's low 2 bits are not the MAC's, and another value there decodes the same.
    const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const loose = `${mac.slice(0, -1)}${B64URL[B64URL.indexOf(mac.at(-1)!) ^ 1]}`;
    expect(Buffer.from(loose, 'base64url')).toEqual(Buffer.from(mac, 'base64url'));
    for (const other of [mac.replace(/-/g, '+').replace(/_/g, '/'), `${mac}=`, loose]) {
      expect(readUnsubscribeToken(box, `${sub}.reminders.${other}`), other).toBeUndefined();
    }
    expect(readUnsubscribeToken(box, `${sub}.reminders.${mac}`)).toEqual({ subscriptionId: sub, kind: 'reminders' });
  });

  it('keep working through a SECRETS_KEY rotation while the old key is a previous one', () => {
    const [oldKey, newKey] = [hex(), hex()];
    const sent = unsubscribeToken(new SecretBox(oldKey), SUB, 'confirmations');
    expect(readUnsubscribeToken(new SecretBox(newKey, oldKey), sent)).toEqual({ subscriptionId: SUB, kind: 'confirmations' });
    expect(readUnsubscribeToken(new SecretBox(newKey), sent)).toBeUndefined();
  });

  it('are not a MAC of the key for any other purpose', () => {
    const box = new SecretBox(hex());
    const mac = unsubscribeToken(box, SUB, 'reminders').split('.')[2]!;
    expect(box.verify('list-unsubscribe', `${SUB}\nreminders`, mac)).toBe(true);
    expect(box.verify('another-purpose', `${SUB}\nreminders`, mac)).toBe(false);
  });
});
