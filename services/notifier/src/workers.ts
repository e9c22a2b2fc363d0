import { randomUUID } from 'node:crypto';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { Batcher, contextOf, inSpan, linkActiveSpanTo, unixSeconds } from '@sb/runtime';
import { ClaimingWorker } from './claiming-worker.js';
import { loadRow, openSecrets, sendVia } from './channels/index.js';
import { type BotFailure, botIdOf, botUpdates, forgetBotIdentity, knownBotIdentity, sendMessenger, tokenHashOf } from './channels/messenger.js';
import { SMTP_TIMEOUT_MS } from './channels/email.js';
import type { Message } from './channels/outcome.js';
import type { Deps } from './deps.js';
import { GIVE_UP_AFTER_S, nextAttemptAt } from './domain/retry.js';
import type { AttemptOutcome, ClaimedDelivery } from './store/deliveries.repo.js';
import { type NotificationRecord, routeOf } from './store/notifications.repo.js';
import { outcomeLabel } from './metrics.js';
import { sendWebhook } from './webhook-sender.js';

/**
 * Deliveries under way at once (each waits on its receiver, not on this process), and of one endpoint: a
 * share, so that receivers that never answer hold only their own places (found from outside: they took
 * all of them, each for the whole timeout, and every other endpoint's deliveries waited behind theirs).
 * An endpoint whose last attempt ran into the timeout gets SLOW_SHARE for SLOW_FOR_MS:
 * with MAX_ENDPOINTS_PER_WALLET endpoints, one owner's hung receivers then hold 16 x 4 of the 400. A
 * fast one keeps PER_ENDPOINT, as many as the one receiver of the benchmark needs.
 */
const IN_FLIGHT = 400;
const PER_ENDPOINT = 100;
const SLOW_SHARE = 4;
const SLOW_FOR_MS = 10 * 60_000;
/** Deliveries claimed at a time, as soon as this many of those under way are done. */
const CLAIM = 50;

/** Not delivered, and waited about the whole timeout for it: a server that never answers (ClaimingWorker's `slow`). */
const ranIntoTimeout = (delivered: boolean, durationMs: number, timeoutMs: number): boolean => !delivered && durationMs >= timeoutMs * 0.9;

const openSecret = async (d: Deps, sealed: string) => d.secrets.open(sealed);

interface Finished {
  id: string;
  outcome: AttemptOutcome;
  now: number;
  next: number | null;
}

/**
 * Sends due webhook deliveries and records their attempts. Up to IN_FLIGHT are under way at once, and
 * more are claimed whenever CLAIM of them are done (ClaimingWorker).
 */
export class WebhookWorker {
  /**
   * Attempts that end at about the same time are recorded in one statement (see `finishAttempts`): one
   * round trip for many instead of a transaction each.
   */
  private readonly finished: Batcher<Finished, void>;
  private readonly worker: ClaimingWorker<ClaimedDelivery>;

  constructor(
    private readonly d: Deps,
    intervalMs = 1000,
  ) {
    // A claim outlives the longest send, so no other replica takes the row meanwhile. One statement:
    // claimed and leased together, or not at all.
    const leaseS = Math.ceil(d.webhookTimeoutMs / 1000) + 60;
    this.worker = new ClaimingWorker('webhooks', intervalMs, d.log, {
      inFlight: IN_FLIGHT,
      claim: CLAIM,
      claimDue: (limit, running, busy) => d.deliveries.claimDue(d.db, { now: unixSeconds(d.clock), limit, leaseS, running, perGroup: PER_ENDPOINT, busy }),
      idOf: (row) => row.id,
      groupOf: (row) => row.endpoint_id,
      perGroup: PER_ENDPOINT,
      slow: { share: SLOW_SHARE, forMs: SLOW_FOR_MS },
      run: (row) => {
        // The sweep links to each delivery; each attempt is a span in the trace of the event that caused it.
        linkActiveSpanTo(row.trace_context);
        return this.deliver(row);
      },
      failed: (err, row, poller) => {
        // Its claim ends and it is sent again, with the same webhook-id (at least once). The database
        // away fails every delivery under way alike: said once with the worker's rounds, not per delivery.
        if (!poller.failed(err))
          d.log.warn({ err, delivery_id: row.id, event_id: row.event_id }, 'webhook attempt not recorded; sent again when its claim ends');
      },
    });
    this.finished = new Batcher(
      async (done) => {
        await d.deliveries.finishAttempts(d.db, done);
        return done.map(() => undefined);
      },
      { maxBatch: 500, span: 'webhook attempts record' },
    );
  }

  /** One round: see ClaimingWorker.round. */
  deliverDue(): Promise<boolean> {
    return this.worker.round();
  }

  start(): void {
    this.worker.start();
  }

  /** Stops claiming, then waits for the deliveries under way (each ends within WEBHOOK_TIMEOUT_MS) and their recording. */
  stop(): Promise<void> {
    return this.worker.stop();
  }

  /** True when the receiver kept the request to the timeout (ClaimingWorker's `slow`). */
  private async deliver(row: ClaimedDelivery): Promise<boolean> {
    const d = this.d;
    const outcome = await inSpan(
      'webhook deliver',
      {
        parent: contextOf(row.trace_context),
        kind: SpanKind.CLIENT,
        attributes: { 'webhook.delivery_id': row.id, 'webhook.event_id': row.event_id, 'webhook.event': row.event, 'webhook.attempt': row.attempt_count + 1 },
      },
      async (span) => {
        const o = await openSecret(d, row.secret_sealed).then(
          (secret) => sendWebhook({ url: row.url, secret, eventId: row.event_id, body: row.body }, { policy: d.addresses, timeoutMs: d.webhookTimeoutMs }),
          // Only a changed SECRETS_KEY does this; it is logged as the attempt's error, never with the secret.
          () => ({ status_code: null, error: 'signing secret cannot be opened (was SECRETS_KEY changed?)', duration_ms: 0, delivered: false }),
        );
        if (o.status_code !== null) span.setAttribute('http.response.status_code', o.status_code);
        if (!o.delivered) span.setStatus({ code: SpanStatusCode.ERROR, message: o.error ?? `status ${o.status_code}` });
        return o;
      },
    );
    const now = unixSeconds(d.clock);
    const next = outcome.delivered ? null : nextAttemptAt(row.attempt_count + 1, row.first_attempt_at ?? now, now);
    await this.finished.add({ id: row.id, outcome, now, next });
    d.metrics.webhookAttempts.inc({ outcome: outcomeLabel(outcome.delivered, next) });
    d.log.info(
      {
        delivery_id: row.id,
        event_id: row.event_id,
        attempt: row.attempt_count + 1,
        status_code: outcome.status_code,
        error: outcome.error,
        duration_ms: outcome.duration_ms,
        next_attempt_at: next,
      },
      outcome.delivered ? 'webhook delivered' : next === null ? 'webhook failed for good' : 'webhook attempt failed',
    );
    // Only a receiver that kept the request to the timeout: one that answers slowly but answers keeps its
    // share (found in review: a 5 s receiver was held to 4 places with the others idle).
    return ranIntoTimeout(outcome.delivered, outcome.duration_ms, d.webhookTimeoutMs);
  }
}

/**
 * Notices under way at once, and claimed at a time once that many are done (see ClaimingWorker). Of
 * one route (the servers a notice goes through: noticeRoute) at most NOTICES_PER_ROUTE, and
 * NOTICES_SLOW_SHARE once one of them ran into its timeout: one owner's mail server that never answers
 * holds up its own notices, not every owner's (found from outside: it took every place).
 */
const NOTICES_IN_FLIGHT = 32;
const NOTICES_CLAIM = 8;
const NOTICES_PER_ROUTE = 16;
const NOTICES_SLOW_SHARE = 2;

/**
 * Due notifications on every channel, each sent on its own (a mail server that hangs holds up its own
 * notices, not the others'); the same retry schedule as webhooks, except that permanent errors (unknown
 * chat, blocked bot, no such mailbox) fail at once and a provider's `retry_after` is honoured.
 */
export function notificationWorker(d: Deps, intervalMs: number): ClaimingWorker<NotificationRecord> {
  // The lease covers the slowest channel (an SMTP conversation) with room to spare.
  const leaseS = Math.ceil((3 * Math.max(SMTP_TIMEOUT_MS, d.channels.timeoutMs * 2)) / 1000) + 60;
  return new ClaimingWorker('notifications', intervalMs, d.log, {
    inFlight: NOTICES_IN_FLIGHT,
    claim: NOTICES_CLAIM,
    claimDue: (want, running, busy) =>
      d.db.tx((tx) => d.notifications.claimDue(tx, { now: unixSeconds(d.clock), limit: want, leaseS, running, perGroup: NOTICES_PER_ROUTE, busy })),
    idOf: (n) => n.id,
    groupOf: routeOf,
    perGroup: NOTICES_PER_ROUTE,
    slow: { share: NOTICES_SLOW_SHARE, forMs: SLOW_FOR_MS },
    run: (n) => notify(d, n),
    failed: (err, n, poller) => {
      // Its claim ends and it is sent again. The database away is said once with the worker's rounds.
      if (!poller.failed(err))
        d.log.warn({ err, notification_id: n.id, event_id: n.event_id }, 'notification attempt not recorded; sent again when its claim ends');
    },
  });
}

/** Sends one notification and records the attempt; true when its channel ran into the timeout. */
async function notify(d: Deps, n: NotificationRecord): Promise<boolean> {
  const started = Date.now();
  let outcome: Awaited<ReturnType<typeof sendVia>>;
  // Each step of an SMTP conversation may take SMTP_TIMEOUT_MS; one that never greets takes one of them.
  const timeoutMs = n.channel === 'email' ? SMTP_TIMEOUT_MS : d.channels.timeoutMs;
  try {
    const message = JSON.parse(d.secrets.open(n.body_sealed)) as Message;
    outcome = await sendVia(d, n.channel, await loadRow(d, d.db, n.wallet_id, n.settings_plan_id), n.recipient, message, n.audience);
  } catch {
    // Only a changed SECRETS_KEY (or a database error) gets here; never with a secret in the words.
    outcome = { delivered: false, error: 'message or channel secrets cannot be opened (was SECRETS_KEY changed?)', permanent: false };
  }
  const duration_ms = Date.now() - started;
  const now = unixSeconds(d.clock);
  const from = n.retry_from ?? now;
  let next = outcome.delivered || outcome.permanent ? null : nextAttemptAt(n.attempt_count + 1, from, now);
  if (next !== null && outcome.retryAfterS !== undefined) next = Math.min(Math.max(next, now + outcome.retryAfterS), from + GIVE_UP_AFTER_S);
  // The attempt row and the status move together, or neither does (as webhook deliveries are recorded).
  await d.db.tx((tx) => d.notifications.finishAttempt(tx, n, { ...outcome, duration_ms }, now, next));
  d.metrics.notificationAttempts.inc({ channel: n.channel, outcome: outcomeLabel(outcome.delivered, next) });
  // The recipient is personal data: the log names the message, channel and event only.
  d.log.info(
    {
      notification_id: n.id,
      event_id: n.event_id,
      channel: n.channel,
      audience: n.audience,
      attempt: n.attempt_count + 1,
      error: outcome.error,
      permanent: outcome.permanent,
      next_attempt_at: next,
    },
    outcome.delivered ? 'notification delivered' : next === null ? 'notification failed for good' : 'notification attempt failed',
  );
  return ranIntoTimeout(outcome.delivered, duration_ms, timeoutMs);
}

/** Bots polled side by side in a round. */
const BOTS_AT_ONCE = 8;
/** After a failed poll: a refused token or a bot with a webhook waits longer than a network error. */
const pollBackoffS = (code: number, retryAfterS?: number): number => retryAfterS ?? (code === 401 || code === 404 ? 600 : code === 409 ? 300 : 30);

/**
 * One round over every configured bot: the private chats that wrote to it since the last round, by
 * username, so notices to a subscriber who gave a Telegram username reach the chat their Start opened.
 * Bots are known by the id in their tokens; every token naming an id is tried, the one getMe confirmed
 * last first, so a revoked copy or a wrong token someone else saved under that id cannot stop the
 * polling. Each bot is leased in the database, so one replica polls it at a time (Telegram refuses two
 * getUpdates at once); the offset saved with the links confirms them to Telegram. Leases use the wall
 * clock: the dev clock moves by days.
 */
export async function pollMessengerBots(d: Deps): Promise<boolean> {
  const tokens = new Map<number, Set<string>>();
  for (const sealed of await d.messenger.sealedWithMessenger(d.db)) {
    let token: string | undefined;
    try {
      token = openSecrets(d, sealed).bot_token;
    } catch {
      /* sealed with another SECRETS_KEY: that row's sends fail and say so */
    }
    const id = token === undefined ? undefined : botIdOf(token);
    if (token && id !== undefined) tokens.set(id, (tokens.get(id) ?? new Set()).add(token));
  }
  const bots = [...tokens];
  for (let i = 0; i < bots.length; i += BOTS_AT_ONCE) {
    const results = await Promise.allSettled(bots.slice(i, i + BOTS_AT_ONCE).map(([botId, set]) => pollBot(d, botId, [...set])));
    for (const r of results) if (r.status === 'rejected') d.log.warn({ err: (r.reason as Error)?.message }, 'messenger bot poll failed');
  }
  return false;
}

async function pollBot(d: Deps, botId: number, tokens: string[]): Promise<void> {
  const now = Math.floor(Date.now() / 1000);
  // getMe and getUpdates, each bounded by the channel timeout, with room to spare.
  const leaseS = Math.ceil((2 * d.channels.timeoutMs) / 1000) + 30;
  const mark = randomUUID();
  const lease = await d.messenger.lease(d.db, botId, now, now + leaseS, mark);
  if (!lease) return;
  const ordered = [...tokens].sort((a, b) => Number(tokenHashOf(b) === lease.token_hash) - Number(tokenHashOf(a) === lease.token_hash));
  let failure: BotFailure = { ok: false, code: 0, why: 'no token to poll with' };
  for (const token of ordered) {
    const api = { apiUrl: d.channels.messengerApiUrl, token, timeoutMs: d.channels.timeoutMs };
    const hash = tokenHashOf(token);
    // A token is trusted for this bot id once Telegram says it is that bot's (asked once per token and
    // day, not on every poll: a bot whose polls fail is polled every 30 s).
    const me = await knownBotIdentity(api);
    if (!me.ok) {
      failure = me;
      if (me.code === 401 || me.code === 404) continue;
      break;
    }
    if (me.id !== botId) {
      failure = { ok: false, code: 401, why: 'the token belongs to another bot' };
      continue;
    }
    const username = me.username ?? lease.username;
    const r = await botUpdates(api, lease.next_offset);
    if (!r.ok) {
      failure = r;
      if (r.code === 401) {
        forgetBotIdentity(api);
        continue;
      }
      break;
    }
    if (!(await d.messenger.polled(d.db, botId, mark, { links: r.links, nextOffset: r.nextOffset, username, tokenHash: hash, now }))) return;
    // A person who pressed Start hears what it did (once: the offset above confirmed the update).
    for (const s of r.started) {
      await sendMessenger(
        api,
        s.chat_id,
        s.username
          ? `Notices about your subscriptions for @${s.username} will come to this chat.`
          : `This chat's id is ${s.chat_id}. Give it as your Telegram contact (or set a Telegram username and give that) to get notices about your subscriptions here.`,
      );
    }
    return;
  }
  await d.messenger.pollFailed(d.db, botId, mark, failure.why, now, now + pollBackoffS(failure.code, failure.retryAfterS));
  // The bot id is public (it is in every link to the bot); no token appears.
  d.log.warn({ bot_id: botId, error: failure.why }, 'messenger bot could not be polled for new chats');
}
