import { randomBytes } from 'node:crypto';
import { messages, notificationMessages, type NotificationSettingsUpdate, type NotificationTestRequest, telegram } from '@sb/contracts';
import {
  answerOnce,
  callMessage,
  messageHandler,
  notFound,
  routeHandler,
  unixSeconds,
  walletOf,
  type Handler,
  type Queryable,
  invalid,
  conflict,
  invalidFields,
} from '@sb/runtime';
import { refusedAddresses } from '../channels/addresses.js';
import { loadEffective, loadRow, openSecrets, sendVia } from '../channels/index.js';
import { botIdOf, tokenHashOf } from '../channels/messenger.js';
import { isNostrContact, npubOf, nsecOf, toHexPubkey, toSecretKey } from '../channels/nostr.js';
import type { Deps } from '../deps.js';
import { testMessage } from '../domain/messages.js';
import { contactMethods, mergeSettings, noticeKinds, noticeRoute, ownerTargets, SettingsError, viewSettings, type Secrets } from '../domain/settings.js';

/** How long the public plan's contact methods wait for the wallet's name (billing waits 2 s for all of it). */
const CONTACT_NAME_WAIT_MS = 1_000;
import type { NotificationRecord } from '../store/notifications.repo.js';
import { WALLET_ROW } from '../store/settings.repo.js';

/** Stores a PUT body as the wallet's row or a plan's override; answers the view (with a generated key once). */
async function save(d: Deps, walletId: string, row: string, body: NotificationSettingsUpdate, fallback: Secrets) {
  const refused = await refusedAddresses(body, d.addresses);
  if (refused.length) throw invalidFields(refused.map(([field, msg]) => ({ field, msg, type: 'value_error' })));
  const prior = await d.settings.get(d.db, walletId, row);
  let merged: ReturnType<typeof mergeSettings>;
  try {
    merged = mergeSettings(body, openSecrets(d, prior?.secrets_sealed ?? null), fallback, {
      serverMail: !!d.channels.smtpUrl,
      newKey: () => randomBytes(32).toString('hex'),
      toSecretHex: (v) => {
        const k = toSecretKey(v);
        return k && Buffer.from(k).toString('hex');
      },
      toPubkeyHex: toHexPubkey,
      publicKeyOf: npubOf,
    });
  } catch (err) {
    if (err instanceof SettingsError) throw invalid(err.loc, err.message);
    throw err;
  }
  const now = unixSeconds(d.clock);
  const hasSecrets = Object.keys(merged.secrets).length > 0;
  await putSettings(d, {
    wallet_id: walletId,
    plan_id: row,
    inherit: false,
    config: merged.settings,
    secrets_sealed: hasSecrets ? d.secrets.seal(JSON.stringify(merged.secrets)) : null,
    updated_at: now,
  });
  return { ...viewSettings(merged.settings, now), ...(merged.generated ? { generated_private_key: nsecOf(merged.generated) } : {}) };
}

/**
 * Stores settings, and in the same transaction moves the wallet's pending e-mails to the route their
 * settings now send them through (noticeRoute): still counted against the owner's own server they no
 * longer go to, they took a second share of places on the server's shared one (found in testing).
 */
async function putSettings(d: Deps, row: Parameters<Deps['settings']['put']>[1]): Promise<void> {
  await d.db.tx(async (tx) => {
    // Two changes at once (the wallet's and a plan's) would each route from the other's old settings.
    await d.settings.lockWallet(tx, row.wallet_id);
    await d.settings.put(tx, row);
    await reroute(d, tx, row.wallet_id);
  });
}

async function reroute(d: Deps, q: Queryable, walletId: string): Promise<void> {
  for (const row of await d.notifications.pendingSettingsRows(q, walletId, 'email')) {
    const { settings } = await loadRow(d, q, walletId, row);
    await d.notifications.setRoute(q, walletId, row, 'email', noticeRoute(walletId, 'email', settings));
  }
}

async function requireOwnPlan(d: Deps, walletId: string, planId: string): Promise<void> {
  const { exists } = await callMessage(d.bus, messages.planExists, { wallet_id: walletId, id: planId });
  if (!exists) throw notFound('Plan');
}

async function planView(d: Deps, walletId: string, planId: string) {
  const own = await d.settings.get(d.db, walletId, planId);
  const inherit = !own || own.inherit;
  const s = await loadEffective(d, d.db, walletId, planId);
  return { plan_id: planId, inherit, ...viewSettings(s.settings, s.updatedAt) };
}

/**
 * Whom a test goes to: the given address, else the owner's own on that channel. Through the server's mail
 * server (not the owner's own) only to the owner's own address: else any owner could have the operator's
 * server send mail under a name of their choosing to anyone.
 */
function testRecipient(
  channel: NotificationTestRequest['channel'],
  to: string | undefined,
  owner: { channel: string; to: string }[],
  serverMail: boolean,
): string {
  const own = owner.find((t) => t.channel === channel)?.to;
  const target = to ?? own;
  if (!target) throw invalid(['to'], `give "to": no owner recipient is configured for the ${channel} channel`);
  if (channel === 'email' && !/^[^\s@]+@[^\s@]+$/.test(target)) throw invalid(['to'], 'to must be an e-mail address');
  if (channel === 'email' && serverMail && target.toLowerCase() !== own?.toLowerCase()) {
    throw invalid(['to'], "through the server's mail server a test goes only to the owner's own address (owner_email); with your own smtp_url, to anyone");
  }
  if (channel === 'nostr' && !isNostrContact(target)) throw invalid(['to'], 'to must be an npub, a hex public key or a NIP-05 identifier');
  if (channel === 'messenger' && !telegram.subscriberChat.test(target)) {
    // A stored owner_chat_id taken by an earlier, looser rule: the owner sent no `to` to blame.
    if (to === undefined) throw invalid(['to'], `the stored owner_chat_id is not a Telegram chat (${telegram.rule}): set it again, or give "to"`);
    throw invalid(['to'], `to must be a Telegram chat: ${telegram.rule}`);
  }
  return target;
}

const toNotification = (
  r: NotificationRecord,
  attempts: Map<string, { attempted_at: number; error: string | null; permanent: boolean; duration_ms: number }[]>,
) => ({
  id: r.id,
  event_id: r.event_id,
  event: r.event,
  audience: r.audience,
  channel: r.channel,
  recipient: r.recipient,
  subscription_id: r.subscription_id,
  plan_id: r.plan_id,
  subject: r.subject,
  status: r.status,
  attempt_count: r.attempt_count,
  last_error: r.last_error,
  next_attempt_at: r.next_attempt_at,
  delivered_at: r.delivered_at,
  created_at: r.created_at,
  attempts: attempts.get(r.id) ?? [],
});

export const notificationHandlers = (d: Deps): Handler[] => [
  routeHandler('notification_settings.get', async (req) => {
    const s = await loadEffective(d, d.db, walletOf(req), undefined);
    return viewSettings(s.settings, s.updatedAt);
  }),

  routeHandler('notification_settings.put', async (req) => save(d, walletOf(req), WALLET_ROW, req.body, {})),

  routeHandler('plan_notification_settings.get', async (req) => {
    await requireOwnPlan(d, walletOf(req), req.params.id);
    return planView(d, walletOf(req), req.params.id);
  }),

  routeHandler('plan_notification_settings.put', async (req) => {
    const walletId = walletOf(req);
    const planId = req.params.id as string;
    await requireOwnPlan(d, walletId, planId);
    const body = req.body;
    if (body.inherit) {
      // The override is kept aside (secrets included) but no longer applies.
      const own = await d.settings.get(d.db, walletId, planId);
      await putSettings(d, {
        wallet_id: walletId,
        plan_id: planId,
        inherit: true,
        config: own?.config ?? null,
        secrets_sealed: own?.secrets_sealed ?? null,
        updated_at: unixSeconds(d.clock),
      });
      return planView(d, walletId, planId);
    }
    const { inherit: _i, ...settings } = body;
    const wallet = await d.settings.get(d.db, walletId, WALLET_ROW);
    const saved = await save(d, walletId, planId, settings, openSecrets(d, wallet?.secrets_sealed ?? null));
    return { plan_id: planId, inherit: false, ...saved };
  }),

  answerOnce(d.answered, d.db, 'notification_settings.test', async (req, _keep, hold) => {
    const body = req.body;
    if (body.plan_id) await requireOwnPlan(d, walletOf(req), body.plan_id);
    const s = await loadEffective(d, d.db, walletOf(req), body.plan_id);
    if (!s.settings.channels[body.channel]) throw invalid(['channel'], `the ${body.channel} channel is not configured${body.plan_id ? ' for this plan' : ''}`);
    const to = testRecipient(body.channel, body.to, ownerTargets(s.settings), !s.secrets.smtp_url);
    // A message sent is not rolled back: it is sent under a claim of the key (see Hold).
    return hold(async () => {
      // A test is the owner's own message, to the address they name.
      const outcome = await sendVia(d, body.channel, s, to, testMessage(body.channel), 'owner');
      d.log.info({ channel: body.channel, delivered: outcome.delivered, error: outcome.error }, 'test notification');
      return { channel: body.channel, to, delivered: outcome.delivered, error: outcome.error };
    });
  }),

  routeHandler('notifications.list', async (req) => {
    const page = await d.notifications.list(d.db, walletOf(req), req.query);
    const attempts = await d.notifications.attemptsOf(
      d.db,
      page.items.map((n) => n.id),
    );
    return { ...page, items: page.items.map((n) => toNotification(n, attempts)) };
  }),

  answerOnce(d.answered, d.db, 'notifications.retry', async (req, keep) => {
    const walletId = walletOf(req);
    return d.db.tx(async (tx) => {
      const outcome = await d.notifications.retry(tx, walletId, req.params.id, unixSeconds(d.clock));
      if (outcome === 'not_found') throw notFound('Notification');
      if (outcome === 'not_failed') throw conflict('Only a failed notification can be retried');
      const n = (await d.notifications.get(tx, walletId, req.params.id))!;
      return keep(tx, toNotification(n, await d.notifications.attemptsOf(tx, [n.id])));
    });
  }),

  messageHandler(notificationMessages.contactMethods, async ({ wallet_id, plan_id }) => {
    const s = await loadEffective(d, d.db, wallet_id, plan_id);
    const token = s.settings.channels.messenger ? s.secrets.bot_token : undefined;
    const botId = token ? botIdOf(token) : undefined;
    // Known once the bot was polled with this very token (its getMe): the checkout page links subscribers to it.
    const bot = token && botId !== undefined ? await d.messenger.usernameOf(d.db, botId, tokenHashOf(token)) : null;
    // The pages name the seller as the messages do: the wallet's own name when the owner saved none,
    // waited for well within billing's 2 s courtesy for this whole answer.
    const merchant = s.merchant ?? (await d.walletNames.of(wallet_id, CONTACT_NAME_WAIT_MS));
    return { methods: contactMethods(s.settings), notice_kinds: noticeKinds(s.settings), ...(bot ? { messenger_bot: bot } : {}), merchant_name: merchant };
  }),
];
