import { describe, expect, it } from 'vitest';
import { contactIssues, preferenceIssues } from '../src/domain/contacts.js';

describe('checkout contacts', () => {
  it('takes npubs, hex keys, NIP-05 names, chat ids and usernames; refuses the rest and a preference without its contact', () => {
    // The x of the generator point: a key on secp256k1, as npub and as hex.
    const npub = 'npub10xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqpkge6d';
    for (const nostr of [npub, 'a'.repeat(64), 'bob@example.com', '_@nostr.example.org']) expect(contactIssues({ nostr }), nostr).toEqual([]);
    // A host and port is no NIP-05 domain: no notice would reach it; local tests (NIP05_ALLOW_HTTP) use one.
    for (const nostr of ['bob@127.0.0.1:8080', 'bob@localhost:21080', 'bob@example.com:443', 'bob@169.254.169.254:80', 'bob@10.0.0.1'])
      expect(contactIssues({ nostr })[0]?.field, nostr).toEqual(['nostr']);
    expect(contactIssues({ nostr: 'bob@127.0.0.1:8080' }, { localNip05: true })).toEqual([]);
    for (const messenger of ['123456789', '-1001234', '-1001234567890123', '@alice_bot', 'alice', '@abcd', 'a'.repeat(32)])
      expect(contactIssues({ messenger }), messenger).toEqual([]);
    // Found from outside: taken, though no Telegram chat has them (usernames of 4 to 32 from a letter, ids of 52 bits).
    for (const messenger of ['@abc', 'abc', '12345678901234567890123', '-12345678901234567', '@_alice', '@1alice', `@${'a'.repeat(33)}`])
      expect(contactIssues({ messenger })[0]?.field, messenger).toEqual(['messenger']);
    // A NIP-05 name on an internationalised top-level domain (found from outside: refused).
    for (const nostr of ['bob@xn--e1afmkfd.xn--p1ai', 'bob@example.xn--p1ai']) expect(contactIssues({ nostr }), nostr).toEqual([]);
    expect(contactIssues({ nostr: 'bob@example.xn--' })[0]?.field).toEqual(['nostr']);
    expect(contactIssues({ nostr: 'not a key' })[0]!.field).toEqual(['nostr']);
    // Every form taken is named (found from outside: hex keys were taken but not named).
    expect(contactIssues({ nostr: 'not a key' })[0]!.msg).toBe(
      'nostr must be an npub, a public key of 64 hex characters, or a NIP-05 identifier (name@domain)',
    );
    expect(contactIssues({ nostr: 'npub1short' })[0]!.field).toEqual(['nostr']);
    // Well-formed, but no point on the curve (or a bad checksum): no notice could ever reach it.
    for (const nostr of ['0'.repeat(64), 'npub1' + 'q'.repeat(58)]) expect(contactIssues({ nostr })[0]!.field, nostr).toEqual(['nostr']);
    expect(contactIssues({ messenger: 'two words' })[0]!.field).toEqual(['messenger']);
    expect(contactIssues({ email: 'a@example.com', contact_preference: 'nostr' })).toEqual([
      { field: ['nostr'], msg: 'contact_preference is nostr: give your nostr contact too', type: 'missing' },
    ]);
    expect(contactIssues({ email: 'a@example.com', contact_preference: 'email' })).toEqual([]);
  });

  it('a preferred channel must be one the plan offers', () => {
    expect(preferenceIssues(undefined, ['email'])).toEqual([]);
    expect(preferenceIssues('email', ['email', 'nostr'])).toEqual([]);
    expect(preferenceIssues('messenger', ['email'])).toEqual([
      { field: ['contact_preference'], msg: 'this plan does not send notices by messenger: choose one of email', type: 'value_error' },
    ]);
    // Found from outside: with no channel configured the answer read "choose one of none".
    expect(preferenceIssues('email', [])).toEqual([
      { field: ['contact_preference'], msg: 'this plan sends no notices to subscribers: leave contact_preference out', type: 'value_error' },
    ]);
  });
});
