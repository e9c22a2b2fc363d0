import type { z } from 'zod';
import { notificationMessages, webhookBody, type EventEnvelope, type NotificationChannel } from '@sb/contracts';
import { Batcher, callMessage, DomainError, newId, traceCarrier, unixSeconds, within, type TraceCarrier } from '@sb/runtime';
import type { Message } from './channels/outcome.js';
import { inEffect, merchantOf } from './channels/index.js';
import type { Deps } from './deps.js';
import { optOutKind, ownerMessage, PAYMENT_EVENTS, subscriberMessage, subscriberWants } from './domain/messages.js';
import { contactMethods, noticeRoute, ownerTargets, subscriberTargets, type StoredSettings } from './domain/settings.js';

export const DELIVERY_ID_PREFIX = 'whd_';
const NOTIFICATION_ID_PREFIX = 'ntf_';
/** Events older than this reach owners' webhooks but no person's inbox. */
const NOTIFY_MAX_AGE_S = 86_400;

/**
 * Whether an event is too old to tell a person about. Its age is how long it has been in the stream, by
 * the wall clock: the event's own timestamp follows the dev clock, which a test moves by days between
 * the event and its handling. A parked event replayed by an operator has no stream time: its timestamp
 * is compared with the service's clock.
 */
export function tooOldToNotify(envelope: EventEnvelope, storedAtMs: number | undefined, nowS: number, wallNowMs: number): boolean {
  return storedAtMs === undefined ? nowS - envelope.timestamp > NOTIFY_MAX_AGE_S : wallNowMs - storedAtMs > NOTIFY_MAX_AGE_S * 1000;
}
type SubscriptionContact = z.infer<(typeof notificationMessages.subscriptionContact)['reply']>;
/** The subscriber as the events billing sends name them (transitions.ts): an empty name is none. */
const subscriberNames = (c: SubscriptionContact) => ({
  ...(c.email ? { subscriber_email: c.email } : {}),
  ...(c.name ? { subscriber_name: c.name } : {}),
});
/** Billing is asked for at most this many subscribers' contacts at once (a batch may need many). */
const CONTACT_LOOKUPS = 16;
/**
 * How long a batch waits in all for the names of payment events' subscribers (a courtesy): with billing
 * hung, the batch is recorded without them well within the stream's 30 s wait for its acknowledgements.
 */
const NAMES_WAIT_MS = 2000;

/** `fn` over `xs`, at most `limit` at a time; results in the order of `xs`. */
async function mapLimit<T, R>(xs: T[], limit: number, fn: (x: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(xs.length);
  let next = 0;
  const worker = async () => {
    while (next < xs.length) {
      const i = next++;
      out[i] = await fn(xs[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, xs.length) }, worker));
  return out;
}

/**
 * A payment's events come from the payments service, which does not know the subscriber: billing names
 * them, so that they say who paid as the subscription's own events do.
 */
const unnamedPayment = (e: EventEnvelope): boolean =>
  PAYMENT_EVENTS.has(e.event) && !!e.data.subscription_id && !e.data.subscriber_email && !e.data.subscriber_name;
const named = (e: EventEnvelope, c: SubscriptionContact | undefined): EventEnvelope => (c ? { ...e, data: { ...e.data, ...subscriberNames(c) } } : e);

/** The subscriber of an event's subscription as billing has it now, asked at most once per event. */
type ContactOf = () => Promise<SubscriptionContact | undefined>;

/**
 * The names of a payment event's subscriber if billing gives them before `by` (Unix ms), else none: never
 * an error, and nothing asked once the batch's wait is over.
 */
async function namesBy(e: EventEnvelope, contactOf: ContactOf, by: number): Promise<EventEnvelope> {
  const left = by - Date.now();
  if (!unnamedPayment(e) || left <= 0) return e;
  return named(
    e,
    await within(
      contactOf().catch(() => undefined),
      left,
      () => undefined,
    ),
  );
}

interface Planned {
  audience: 'subscriber' | 'owner';
  channel: NotificationChannel;
  to: string;
  message: Message;
}

interface Pending {
  envelope: EventEnvelope;
  storedAtMs: number | undefined;
  /** The trace of the event's processing, kept with each delivery for its attempts. */
  trace: TraceCarrier | null;
}
type Recorded = { deliveries: number; notifications: number };

/**
 * Turns domain events into the work they cause: a delivery per matching webhook endpoint, and a
 * notification per person and channel the settings in effect for the event's plan name (the subscriber
 * on the channels their contacts and preference pick, the owner on the events they chose). Events handled
 * at about the same time are recorded together, by a few multi-row statements (round trips are what
 * costs). Every row is unique per event, so a redelivered event adds nothing, and one replayed after a
 * crash part-way only what is missing; each event's JetStream message is acknowledged only after all its
 * rows are written, so a crash before that replays the event.
 */
export class EventRecorder {
  private readonly batcher: Batcher<Pending, Recorded>;

  constructor(private readonly d: Deps) {
    this.batcher = new Batcher((items) => this.recordAll(items), { maxBatch: 200, maxConcurrent: 2, span: 'notifier events record' });
  }

  /** Resolves once the event's deliveries and notifications are committed. */
  record(envelope: EventEnvelope, storedAtMs?: number): Promise<Recorded> {
    return this.batcher.add({ envelope, storedAtMs, trace: traceCarrier() });
  }

  private async recordAll(items: Pending[]): Promise<Recorded[]> {
    const d = this.d;
    // The consumer starts at the beginning of the stream: a first deployment (or a new durable) must not
    // message anyone about cancellations and reminders of long ago.
    const nowS = unixSeconds(d.clock);
    const wallNowMs = Date.now();
    const recent = items.filter((p) => !tooOldToNotify(p.envelope, p.storedAtMs, nowS, wallNowMs));
    const rows = recent.length
      ? await d.settings.effectiveMany(
          d.db,
          recent.map((p) => ({ walletId: p.envelope.wallet_id, planId: p.envelope.data.plan_id })),
        )
      : [];
    const settings = new Map(recent.map((p, i) => [p, { ...inEffect(d, rows[i]), merchant: merchantOf(rows[i]) }]));
    const contacts = items.map((p) => this.contactOf(p.envelope));
    const namesUntil = Date.now() + NAMES_WAIT_MS;
    const planned = await mapLimit(items, CONTACT_LOOKUPS, (p, i) => this.plan(p.envelope, settings.get(p), contacts[i]!, namesUntil));
    const nowMs = d.clock.nowMs();
    const now = Math.floor(nowMs / 1000);
    const matches = await d.endpoints.matchingMany(
      d.db,
      items.map(({ envelope: e }) => ({ walletId: e.wallet_id, event: e.event, planId: e.data.plan_id })),
    );
    // A courtesy, as in owner notices: with billing away or slow the webhook goes without the names (the
    // body is kept as first signed, for its retries and replays). An event too old to tell a person about
    // is not worth asking for (a new durable consumer replays the stream).
    const hooked = new Set(matches.map((m) => m.i));
    const bodies = await mapLimit(items, CONTACT_LOOKUPS, async (p, i) =>
      hooked.has(i) ? webhookBody(settings.has(p) ? await namesBy(p.envelope, contacts[i]!, namesUntil) : p.envelope) : undefined,
    );
    const fresh = await d.deliveries.recordMany(
      d.db,
      matches.map(({ i, id }) => {
        const { envelope: e, trace } = items[i]!;
        // The body receivers get: the WebhookEvent; the event id travels in the webhook-id header.
        const payload = bodies[i]!;
        return {
          id: newId(DELIVERY_ID_PREFIX, nowMs),
          endpoint_id: id,
          wallet_id: e.wallet_id,
          event_id: e.id,
          event: e.event,
          body: JSON.stringify(payload),
          now,
          trace,
        };
      }),
    );
    const notified = await d.notifications.recordMany(
      d.db,
      items.flatMap(({ envelope: e }, i) =>
        planned[i]!.map((p) => ({
          id: newId(NOTIFICATION_ID_PREFIX, nowMs),
          wallet_id: e.wallet_id,
          event_id: e.id,
          event: e.event,
          audience: p.audience,
          channel: p.channel,
          route: noticeRoute(e.wallet_id, p.channel, settings.get(items[i]!)!.settings),
          recipient: p.to,
          subscription_id: e.data.subscription_id ?? null,
          plan_id: e.data.plan_id ?? null,
          settings_plan_id: settings.get(items[i]!)!.row,
          subject: p.message.subject,
          body_sealed: d.secrets.seal(JSON.stringify(p.message)),
          created_at: now,
        })),
      ),
    );
    const count = (ids: string[]) => {
      const n = new Map<string, number>();
      for (const id of ids) n.set(id, (n.get(id) ?? 0) + 1);
      return n;
    };
    const [deliveries, notifications] = [count(fresh), count(notified)];
    const out = items.map(({ envelope: e }) => ({ deliveries: deliveries.get(e.id) ?? 0, notifications: notifications.get(e.id) ?? 0 }));
    return out;
  }

  /**
   * The contacts as they are now, and the portal link (never carried in events: it holds the token), of
   * the event's subscription (none without one); asked of billing once, when first needed.
   */
  private contactOf(envelope: EventEnvelope): ContactOf {
    const id = envelope.data.subscription_id;
    let asked: Promise<SubscriptionContact | undefined> | undefined;
    return () =>
      (asked ??= id
        ? callMessage(this.d.bus, notificationMessages.subscriptionContact, { wallet_id: envelope.wallet_id, subscription_id: id }).catch((err) => {
            if (err instanceof DomainError && err.kind === 'not_found') return undefined;
            throw err;
          })
        : Promise.resolve(undefined));
  }

  /** The notifications one event causes under the settings in effect (none for an old event). */
  private async plan(
    envelope: EventEnvelope,
    s: { settings: StoredSettings; merchant: string | null } | undefined,
    contactOf: ContactOf,
    namesUntil: number,
  ): Promise<Planned[]> {
    const planned: Planned[] = [];
    if (!s) return planned;
    const subId = envelope.data.subscription_id;
    const owners = s.settings.owner_events.includes(envelope.event) ? ownerTargets(s.settings) : [];
    if (owners.length) {
      // The notice has the Subscriber line the subscription's own events carry. A courtesy: with billing
      // away or slow the notice goes without it.
      const message = ownerMessage(await namesBy(envelope, contactOf, namesUntil));
      for (const t of owners) planned.push({ audience: 'owner', ...t, message });
    }
    // Billing is asked for the contacts only when a channel could reach the subscriber.
    if (subId && contactMethods(s.settings).length && subscriberWants(envelope, s.settings.subscriber_events)) {
      const contact = await contactOf();
      if (contact) {
        const kind = optOutKind(envelope.event);
        const reader = {
          name: contact.name,
          manageUrl: contact.manage_url,
          checkoutUrl: contact.plan_checkout_url,
          merchant: s.merchant ?? (await this.d.walletNames.of(envelope.wallet_id)),
        };
        const message = subscriberMessage(envelope, reader);
        // E-mail carries the one-click link (header and a line); other channels point to the portal only.
        const email = subscriberMessage(envelope, { ...reader, unsubscribe: kind && contact.unsubscribe_urls?.[kind] });
        for (const t of subscriberTargets(s.settings, contact))
          planned.push({ audience: 'subscriber', ...t, message: t.channel === 'email' ? email : message });
      }
    }
    return planned;
  }
}
