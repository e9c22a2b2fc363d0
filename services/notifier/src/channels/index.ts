import type { NotificationChannel } from '@sb/contracts';
import type { Deps } from '../deps.js';
import { defaultSettings, type Secrets, type StoredSettings } from '../domain/settings.js';
import { WALLET_ROW, type SettingsRow } from '../store/settings.repo.js';
import type { Queryable } from '@sb/runtime';
import { sendEmail, senderFor } from './email.js';
import { type BotApi, botIdOf, chatUsername, sendMessenger, usernameOf } from './messenger.js';
import { sendNostr } from './nostr.js';
import { failed, type Message, type SendOutcome } from './outcome.js';

/** Settings with their secrets opened, as a send needs them. */
interface Loaded {
  walletId: string;
  /** The row they came from ('' = the wallet's; also for defaults). */
  row: string;
  settings: StoredSettings;
  secrets: Secrets;
  updatedAt: number | null;
  /**
   * Who signs subscriber messages and names the e-mail sender: the row's merchant name, else the wallet
   * settings'; null: the wallet's own name, asked only when a mail is sent (see WalletNames).
   */
  merchant: string | null;
}

/** Every subscriber message names the merchant: a plan's override without a name has the wallet's. */
export const merchantOf = (r: SettingsRow | undefined): string | null => r?.config?.merchant_name ?? r?.wallet_merchant_name ?? null;

export const openSecrets = (d: Deps, sealed: string | null): Secrets => (sealed ? (JSON.parse(d.secrets.open(sealed)) as Secrets) : {});

/** The settings in effect for a plan (its override, else the wallet's, else the defaults); `planId` undefined: the wallet's. */
export async function loadEffective(d: Deps, q: Queryable, walletId: string, planId: string | undefined): Promise<Loaded> {
  const r = await d.settings.effective(q, walletId, planId);
  return {
    walletId,
    ...inEffect(d, r),
    secrets: r?.config ? openSecrets(d, r.secrets_sealed) : {},
    updatedAt: r?.config ? r.updated_at : null,
    merchant: merchantOf(r),
  };
}

/** The row and settings that `effective` found in effect (the defaults when none); secrets left sealed. */
export function inEffect(d: Deps, r: SettingsRow | undefined): { row: string; settings: StoredSettings } {
  return r?.config ? { row: r.plan_id, settings: r.config } : { row: WALLET_ROW, settings: defaultSettings(!!d.channels.smtpUrl) };
}

/** The settings of one row exactly (a message is sent with the row it was recorded under). */
export async function loadRow(d: Deps, q: Queryable, walletId: string, row: string): Promise<Loaded> {
  const r = await d.settings.get(q, walletId, row);
  if (!r?.config || (row !== WALLET_ROW && r.inherit)) {
    return row === WALLET_ROW
      ? { walletId, row, settings: defaultSettings(!!d.channels.smtpUrl), secrets: {}, updatedAt: null, merchant: null }
      : loadEffective(d, q, walletId, undefined);
  }
  return { walletId, row, settings: r.config, secrets: openSecrets(d, r.secrets_sealed), updatedAt: r.updated_at, merchant: merchantOf(r) };
}

/**
 * Where a messenger handle is written to. A username goes to the private chat it opened by pressing
 * Start (Telegram cannot write to a person by username), while that chat still carries the name (a
 * username can pass to someone else, and the message carries the portal link); until then a subscriber's
 * message waits for it. An owner's `@name` not linked to a private chat is their channel or group
 * (`owner_chat_id` takes one) and goes as it is, as does a number or a handle of a bot that cannot be read.
 */
async function messengerTarget(d: Deps, api: BotApi, to: string, audience: Audience): Promise<{ chat: string | number } | SendOutcome> {
  const username = usernameOf(to);
  const botId = botIdOf(api.token);
  if (username === undefined || botId === undefined) return { chat: to };
  const link = await d.messenger.linkOf(d.db, botId, username);
  if (link.chat_id !== null) {
    const now = await chatUsername(api, link.chat_id);
    if (!now.ok && (now.code === 0 || now.code === 429 || now.code >= 500)) return failed(now.why, false, now.retryAfterS);
    if (now.ok && now.username === username) return { chat: link.chat_id };
    await d.messenger.unlink(d.db, botId, username, link.chat_id);
  }
  if (audience === 'owner') return { chat: to };
  // Not sent to "@name": a bot cannot write to a person by username, and Telegram would deliver it to a
  // public channel or group of that name instead (the portal link with it). The notice waits for Start.
  return failed(
    link.bot_error ? `${to} is not linked to a chat: the bot cannot be polled for new chats (${link.bot_error})` : `${to} has not pressed Start on the bot yet`,
  );
}

export type Audience = 'subscriber' | 'owner';

/** One message through one channel with these settings. Never throws. */
export async function sendVia(d: Deps, channel: NotificationChannel, s: Loaded, to: string, m: Message, audience: Audience): Promise<SendOutcome> {
  try {
    switch (channel) {
      case 'email': {
        const e = s.settings.channels.email;
        const smtp = s.secrets.smtp_url ?? d.channels.smtpUrl;
        if (!e || !smtp) return failed('the e-mail channel is switched off', true);
        const own = !!s.secrets.smtp_url;
        const merchant = s.merchant ?? (own ? null : await d.walletNames.of(s.walletId));
        return await sendEmail(smtp, senderFor(d.channels.mailFrom, e.from, merchant, own), to, m, own ? d.addresses : undefined, (detail) =>
          d.log.warn({ error: detail }, 'the SMTP_URL mail server could not be reached'),
        );
      }
      case 'messenger': {
        if (!s.settings.channels.messenger || !s.secrets.bot_token) return failed('the messenger channel is switched off', true);
        const api = { apiUrl: d.channels.messengerApiUrl, token: s.secrets.bot_token, timeoutMs: d.channels.timeoutMs };
        const target = await messengerTarget(d, api, to, audience);
        if ('delivered' in target) return target;
        return await sendMessenger(api, target.chat, `${m.subject}\n\n${m.text}`);
      }
      case 'nostr': {
        const n = s.settings.channels.nostr;
        if (!n || !s.secrets.nostr_key) return failed('the Nostr channel is switched off', true);
        return await sendNostr({ secretHex: s.secrets.nostr_key, relays: n.relays, nip04: n.nip04 }, to, `${m.subject}\n\n${m.text}`, {
          policy: d.addresses,
          timeoutMs: d.channels.timeoutMs,
          nip05Http: d.channels.nip05Http,
        });
      }
    }
  } catch (err) {
    return failed((err as Error).message || String(err));
  }
}
