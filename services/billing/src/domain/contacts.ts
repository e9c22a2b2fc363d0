import { type FieldIssue, telegram } from '@sb/contracts';
import { isNostrPublicKey } from '@sb/runtime';
import * as nip19 from 'nostr-tools/nip19';

type Channel = 'email' | 'messenger' | 'nostr';

/** A Nostr contact the notifier can reach: an npub, a hex public key, or a NIP-05 identifier (name@domain). */
const NOSTR = /^(npub1[02-9ac-hj-np-z]{58}|[0-9a-f]{64}|[a-z0-9._-]+@[a-z0-9.-]+\.(?:[a-z]{2,}|xn--[a-z0-9-]+))$/i;
/**
 * name@host:port is no NIP-05 identifier (the protocol names a domain, looked up over https on its port);
 * taken only where NIP-05 is looked up over plain http for local tests (NIP05_ALLOW_HTTP). Taken always, a
 * subscriber could give one that no notice would ever reach (found from outside).
 */
const NIP05_LOCAL = /^[a-z0-9._-]+@[a-z0-9.-]+:\d{1,5}$/i;
/** An npub or hex key is the x of a secp256k1 point (all zeros is not); a NIP-05 name is resolved later. */
function keyOnCurve(v: string): boolean {
  if (v.includes('@')) return true;
  if (/^[0-9a-f]{64}$/i.test(v)) return isNostrPublicKey(v);
  try {
    const d = nip19.decode(v as `npub1${string}`);
    return d.type === 'npub' && isNostrPublicKey(d.data);
  } catch {
    return false;
  }
}

/**
 * The contact fields a checkout gave, checked so that notices can reach them: a malformed handle would
 * only fail at the first notice. A preferred channel must come with its contact.
 */
export function contactIssues(
  c: {
    messenger?: string | undefined;
    nostr?: string | undefined;
    email?: string | undefined;
    contact_preference?: Channel | undefined;
  },
  opts: { localNip05?: boolean } = {},
): FieldIssue[] {
  const issues: FieldIssue[] = [];
  if (c.messenger !== undefined && !telegram.subscriberChat.test(c.messenger.trim())) {
    issues.push({ field: ['messenger'], msg: `messenger must be a Telegram chat: ${telegram.rule}`, type: 'value_error' });
  }
  const nostr = c.nostr?.trim();
  if (nostr !== undefined && !(opts.localNip05 && NIP05_LOCAL.test(nostr)) && (!NOSTR.test(nostr) || !keyOnCurve(nostr))) {
    issues.push({
      field: ['nostr'],
      msg: 'nostr must be an npub, a public key of 64 hex characters, or a NIP-05 identifier (name@domain)',
      type: 'value_error',
    });
  }
  const pref = c.contact_preference;
  if (pref && !c[pref]) issues.push({ field: [pref], msg: `contact_preference is ${pref}: give your ${pref} contact too`, type: 'missing' });
  return issues;
}

/** A preferred channel the plan does not send on would never be used: refused, naming what is offered. */
export function preferenceIssues(pref: Channel | undefined, offered: readonly string[]): FieldIssue[] {
  if (!pref || offered.includes(pref)) return [];
  const msg = offered.length
    ? `this plan does not send notices by ${pref}: choose one of ${offered.join(', ')}`
    : `this plan sends no notices to subscribers: leave contact_preference out`;
  return [{ field: ['contact_preference'], msg, type: 'value_error' }];
}
