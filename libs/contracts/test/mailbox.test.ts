import { describe, expect, it } from 'vitest';
import { parseMailbox } from '../src/notifications.js';

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
