import { describe, expect, it } from 'vitest';
import { toValidationDetail } from '../src/common.js';
import { NotificationSettingsUpdate, parseMailbox } from '../src/notifications.js';
import { PlanCreate } from '../src/plans.js';

describe('a sender as one mailbox', () => {
  it('reads a bare address, plain words and a quoted name (commas and escaped quotes inside)', () => {
    expect(parseMailbox('shop@example.com')).toEqual({ name: '', address: 'shop@example.com' });
    expect(parseMailbox('Shop <shop@example.com>')).toEqual({ name: 'Shop', address: 'shop@example.com' });
    expect(parseMailbox('"Acme, Inc." <billing@acme.com>')).toEqual({ name: 'Acme, Inc.', address: 'billing@acme.com' });
    expect(parseMailbox('"Shop \\"X\\"" <a@b.example>')).toEqual({ name: 'Shop "X"', address: 'a@b.example' });
  });

  it('refuses line breaks and other control characters, several addresses and garbage', () => {
    for (const v of [
      'x\r\nBcc: evil@example.com',
      'Shop <shop@example.com>\r\nBcc: evil@example.com',
      'Shop\t<a@b.c>',
      '<<<>>>',
      'a@b.c, c@d.e',
      'no address',
      '"unclosed <a@b.c>',
    ]) {
      expect(parseMailbox(v), JSON.stringify(v)).toBeUndefined();
    }
  });
});

describe('notification settings: what mail programs would show otherwise', () => {
  const issues = (body: unknown) => {
    const r = NotificationSettingsUpdate.safeParse(body);
    return r.success ? [] : toValidationDetail(r.error.issues, 'body');
  };

  it('refuses an encoded word in the sender or the merchant name, which would carry refused characters past the check (found from outside)', () => {
    // "PayPal Support" followed by U+202E and U+200B, as a mail program decodes it.
    const hidden = '=?utf-8?b?UGF5UGFsIFN1cHBvcnTigK7igIs=?=';
    for (const from of [`${hidden} <shop@example.com>`, `"${hidden}" <shop@example.com>`, '=?UTF-8?Q?Shop=E2=80=AE?= <a@b.example>']) {
      expect(issues({ channels: { email: { from } } }).map((i) => i.loc)).toEqual([['body', 'channels', 'email', 'from']]);
    }
    expect(issues({ channels: {}, merchant_name: hidden }).map((i) => i.loc)).toEqual([['body', 'merchant_name']]);
    // Plan names too: they are in messages' subjects (found in review: a subject passed it on as it was).
    expect(PlanCreate.safeParse({ name: hidden, amount_sats: 1000, interval: 'monthly' }).success).toBe(false);
    expect(PlanCreate.safeParse({ name: 'Gold', amount_sats: 1000, interval: 'monthly' }).success).toBe(true);
    // Plain names with the same characters in them are fine: "=?" alone is no encoded word.
    expect(issues({ channels: { email: { from: 'Shop =? <shop@example.com>' } }, merchant_name: 'Is it =?b? here' })).toEqual([]);
  });

  it('a list given as a string is said to be the wrong type, once, not also "too long" as a string (found from outside)', () => {
    expect(issues({ channels: { nostr: { relays: 'ws://127.0.0.1:12700' } } })).toEqual([
      { loc: ['body', 'channels', 'nostr', 'relays'], msg: 'Invalid input: expected array, received string', type: 'invalid_type' },
    ]);
  });
});
