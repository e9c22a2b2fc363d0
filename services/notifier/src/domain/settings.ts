import { ALWAYS_SENT_NOTICES, SWITCHABLE_NOTICES, type NotificationChannel, type NotificationSettings, type NotificationSettingsUpdate } from '@sb/contracts';
import { UnsubscribeKind, type ContactPreference } from '@sb/contracts';
import { optOutKind } from './messages.js';

/** The settings as stored, without secrets (those are sealed apart, see `Secrets`). */
export interface StoredSettings {
  channels: {
    email: { own_smtp: boolean; from: string | null; owner_email: string | null } | null;
    messenger: { owner_chat_id: string | null } | null;
    nostr: { public_key: string; relays: string[]; owner_pubkey: string | null; nip04: boolean } | null;
  };
  /** Absent in settings stored before it existed. */
  merchant_name?: string | null;
  owner_events: string[];
  subscriber_events: string[];
}

/** Sealed with SECRETS_KEY as one JSON document; never answered, never logged. */
export interface Secrets {
  smtp_url?: string;
  bot_token?: string;
  /** 64 hex. */
  nostr_key?: string;
}

/** What applies to a wallet that saved nothing: e-mail through the server's mail server (if any), every subscriber notice, no owner notice. */
export const defaultSettings = (serverMail: boolean): StoredSettings => ({
  channels: { email: serverMail ? { own_smtp: false, from: null, owner_email: null } : null, messenger: null, nostr: null },
  owner_events: [],
  subscriber_events: kept(SWITCHABLE_NOTICES),
});

/**
 * A list of subscriber notices as kept: each once, with those always sent, so that a replica of an earlier
 * version (a rolling upgrade, a rollback), which reads them from the list, still sends them.
 */
const kept = (events: readonly string[]): string[] => [...new Set([...events, ...ALWAYS_SENT_NOTICES])];
/** As shown: the ones the list switches. */
const switchable = (events: readonly string[]): string[] => events.filter((e) => !ALWAYS_SENT_NOTICES.includes(e));

/**
 * The servers a notice goes through, as the notice worker shares its places (a share each): the owner's
 * own mail server or relays are the wallet's alone; the server's mail server (SMTP_URL) and the messenger's
 * Bot API are shared by every wallet, so one of them hanging holds one share, not one per wallet (found in
 * review: each wallet's share of a hung shared server filled every place).
 */
export function noticeRoute(walletId: string, channel: NotificationChannel, s: StoredSettings): string {
  if (channel === 'messenger') return 'messenger';
  if (channel === 'email' && !s.channels.email?.own_smtp) return 'email';
  return `${channel}:${walletId}`;
}

export class SettingsError extends Error {
  constructor(
    readonly loc: (string | number)[],
    msg: string,
  ) {
    super(msg);
  }
}

/**
 * A PUT body merged with what was stored: a secret left out keeps the stored one (`keep`, then `fallback`:
 * a plan override starts from the wallet's secrets), so owners never send a token twice. `publicKeyOf`
 * and `newKey` come from the Nostr module (no crypto here).
 */
export function mergeSettings(
  input: NotificationSettingsUpdate,
  keep: Secrets,
  fallback: Secrets,
  o: {
    serverMail: boolean;
    newKey: () => string;
    toSecretHex: (v: string) => string | undefined;
    toPubkeyHex: (v: string) => string | undefined;
    publicKeyOf: (hex: string) => string;
  },
): { settings: StoredSettings; secrets: Secrets; generated?: string } {
  const secrets: Secrets = {};
  let generated: string | undefined;
  const c = input.channels;
  let email: StoredSettings['channels']['email'] = null;
  if (c.email) {
    const smtp = c.email.smtp_url === null ? undefined : (c.email.smtp_url ?? keep.smtp_url ?? fallback.smtp_url);
    if (!smtp && !o.serverMail)
      throw new SettingsError(['channels', 'email', 'smtp_url'], 'this server has no mail server of its own (SMTP_URL): give your smtp_url');
    if (smtp) secrets.smtp_url = smtp;
    email = { own_smtp: !!smtp, from: c.email.from ?? null, owner_email: c.email.owner_email ?? null };
  }
  let messenger: StoredSettings['channels']['messenger'] = null;
  if (c.messenger) {
    const token = c.messenger.bot_token ?? keep.bot_token ?? fallback.bot_token;
    if (!token) throw new SettingsError(['channels', 'messenger', 'bot_token'], 'bot_token is required to switch the messenger channel on');
    secrets.bot_token = token;
    messenger = { owner_chat_id: c.messenger.owner_chat_id ?? null };
  }
  let nostr: StoredSettings['channels']['nostr'] = null;
  if (c.nostr) {
    if (c.nostr.private_key && c.nostr.generate_key) throw new SettingsError(['channels', 'nostr'], 'give private_key or generate_key, not both');
    let key = c.nostr.private_key ? o.toSecretHex(c.nostr.private_key) : undefined;
    if (c.nostr.private_key && !key) throw new SettingsError(['channels', 'nostr', 'private_key'], 'private_key is not a valid Nostr secret key');
    if (!key && !c.nostr.generate_key) key = keep.nostr_key ?? fallback.nostr_key;
    if (!key) generated = key = o.newKey();
    secrets.nostr_key = key;
    const owner = c.nostr.owner_pubkey ? o.toPubkeyHex(c.nostr.owner_pubkey) : undefined;
    if (c.nostr.owner_pubkey && !owner) throw new SettingsError(['channels', 'nostr', 'owner_pubkey'], 'owner_pubkey is not a valid npub');
    nostr = { public_key: o.publicKeyOf(key), relays: [...new Set(c.nostr.relays)], owner_pubkey: c.nostr.owner_pubkey ?? null, nip04: c.nostr.nip04 };
  }
  return {
    settings: {
      channels: { email, messenger, nostr },
      merchant_name: input.merchant_name ?? null,
      owner_events: [...new Set(input.owner_events)],
      subscriber_events: kept(input.subscriber_events),
    },
    secrets,
    ...(generated ? { generated } : {}),
  };
}

/** The settings as the API shows them: secrets only as `configured`. */
export function viewSettings(s: StoredSettings, updatedAt: number | null): NotificationSettings {
  const { email, messenger, nostr } = s.channels;
  return {
    channels: {
      email: email && { smtp_url: email.own_smtp ? 'configured' : null, from: email.from, owner_email: email.owner_email },
      messenger: messenger && { bot_token: 'configured', owner_chat_id: messenger.owner_chat_id },
      nostr: nostr && { private_key: 'configured', public_key: nostr.public_key, relays: nostr.relays, owner_pubkey: nostr.owner_pubkey, nip04: nostr.nip04 },
    },
    merchant_name: s.merchant_name ?? null,
    owner_events: s.owner_events as NotificationSettings['owner_events'],
    subscriber_events: switchable(s.subscriber_events) as NotificationSettings['subscriber_events'],
    updated_at: updatedAt,
  };
}

/** The contact fields a checkout should ask for: one per channel switched on. */
export const contactMethods = (s: StoredSettings): ContactPreference[] => (['email', 'messenger', 'nostr'] as const).filter((ch) => s.channels[ch] !== null);

/** The opt-ins (reminders, confirmations) under which the settings send a subscriber at least one notice. */
export const noticeKinds = (s: StoredSettings): UnsubscribeKind[] =>
  UnsubscribeKind.options.filter((k) => s.subscriber_events.some((e) => optOutKind(e) === k));

export interface Contact {
  email: string | null;
  messenger: string | null;
  nostr: string | null;
  contact_preference: ContactPreference | null;
}

/**
 * Where a subscriber's notice goes: their preferred channel when they gave that contact and the plan has
 * that channel; otherwise every contact they gave that a channel of the plan covers.
 */
export function subscriberTargets(s: StoredSettings, c: Contact): { channel: NotificationChannel; to: string }[] {
  const all = contactMethods(s).flatMap((ch) => (c[ch] ? [{ channel: ch, to: c[ch]! }] : []));
  const preferred = all.filter((t) => t.channel === c.contact_preference);
  return preferred.length ? preferred : all;
}

/** The owner's own recipients, one per configured channel that names one. */
export function ownerTargets(s: StoredSettings): { channel: NotificationChannel; to: string }[] {
  const { email, messenger, nostr } = s.channels;
  return [
    ...(email?.owner_email ? [{ channel: 'email' as const, to: email.owner_email }] : []),
    ...(messenger?.owner_chat_id ? [{ channel: 'messenger' as const, to: messenger.owner_chat_id }] : []),
    ...(nostr?.owner_pubkey ? [{ channel: 'nostr' as const, to: nostr.owner_pubkey }] : []),
  ];
}
