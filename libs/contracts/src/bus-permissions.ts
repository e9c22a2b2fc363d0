import { EVENTS_STREAM, WORKING_PROBE_SUBJECT, WORKING_SUFFIX } from './bus.js';
import { type EventName, eventSubject } from './events.js';
import { messages as internalMessages } from './internal.js';
import { notificationMessages } from './notifications.js';
import { routes } from './routes.js';

/**
 * Who may say what on the bus, derived from the contracts: every route and message names its subject,
 * the tables below name who sends each message, who emits each event and which durable consumers each
 * service reads. The NATS server configuration (scripts/nats-config.mjs, deploy/k8s) is generated from
 * `busPermissions()`, so a subject added to the contracts is allowed for its owner and nobody else.
 */
export const BUS_SERVICES = ['gateway', 'billing', 'payments', 'nwc', 'notifier'] as const;
export type BusService = (typeof BUS_SERVICES)[number];

/** Every service-to-service message of the contracts. */
const messages = { ...internalMessages, ...notificationMessages };

/** Which services call each service-to-service message (its owner, the subject's first token, answers it). */
export const MESSAGE_SENDERS: { [K in keyof typeof messages]: BusService[] } = {
  createPayment: ['billing'],
  createPayments: ['billing'],
  expireOpenPayments: ['billing'],
  markUnapplied: ['billing'],
  markApplied: ['billing'],
  paymentMethods: ['billing'],
  getPayment: ['billing', 'nwc'],
  listSubscriptionPayments: ['billing'],
  listPortalPayments: ['billing'],
  fiatQuote: ['billing'],
  watchonlyWalletExists: ['billing'],
  confirmPreimage: ['nwc'],
  planExists: ['notifier'],
  planOffered: ['gateway'],
  subscribeNwc: ['nwc'],
  subscribeNwcCheck: ['nwc'],
  subscriberOfToken: ['nwc'],
  nwcFallback: ['nwc'],
  subscriptionStatus: ['nwc'],
  renewalEnded: ['payments'],
  nwcReconnect: ['nwc'],
  nwcReconnectCheck: ['nwc'],
  firstPaymentDue: ['nwc'],
  nwcCharge: ['billing'],
  contactMethods: ['billing'],
  subscriptionContact: ['notifier'],
  walletName: ['notifier'],
};

/**
 * The services that write each event to their outbox (and so publish it to the EVENTS stream): one, except
 * `payment.failed`, which payments emits when a provider fails a payment and nwc when a wallet fails a charge.
 */
export const EVENT_EMITTERS: Record<EventName, BusService | BusService[]> = {
  'subscription.created': 'billing',
  'subscription.activated': 'billing',
  'subscription.renewed': 'billing',
  'subscription.payment_failed': 'billing',
  'subscription.past_due': 'billing',
  'subscription.paused': 'billing',
  'subscription.resumed': 'billing',
  'subscription.cancelled': 'billing',
  'subscription.expired': 'billing',
  'subscription.extended': 'billing',
  'subscription.trial_ending': 'billing',
  'payment.received': 'payments',
  'payment.failed': ['payments', 'nwc'],
  'renewal.reminder': 'billing',
  'plan.archived': 'billing',
  'nwc.wallet_disabled': 'nwc',
  'payment.unapplied': 'billing',
};

/** The durable JetStream consumers of the EVENTS stream: each service may read through its own only. */
export const EVENT_CONSUMERS = {
  billingPayments: { service: 'billing', durable: 'billing-payments', filterSubject: eventSubject('payment.received') },
  notifier: { service: 'notifier', durable: 'notifier', filterSubject: 'events.>' },
} as const satisfies Record<string, { service: BusService; durable: string; filterSubject: string }>;

/** The dev clock's KV bucket (DEV_MODE only): every service reads it, only billing (`POST /dev/clock`) writes it. */
export const DEV_CLOCK_BUCKET = 'dev_clock';
const DEV_CLOCK_WRITERS: BusService[] = ['billing'];

export interface BusPermission {
  publish: string[];
  subscribe: string[];
  /** May answer requests it received (on their reply subjects only). */
  allowResponses: boolean;
}

/** Each service's requests get replies on an inbox prefix of its own, so no other client can read them. */
export const inboxPrefix = (service: string) => `_INBOX_${service}`;

const ownerOf = (subject: string) => subject.split('.', 1)[0] as BusService;

export function busPermissions(opts: { devMode?: boolean } = {}): Record<BusService, BusPermission> {
  const perms = Object.fromEntries(
    BUS_SERVICES.map((s) => [s, { publish: new Set<string>(), subscribe: new Set<string>([`${inboxPrefix(s)}.>`]), allowResponses: false }]),
  ) as Record<BusService, { publish: Set<string>; subscribe: Set<string>; allowResponses: boolean }>;
  const js = (s: BusService, ...subjects: string[]) => {
    for (const x of subjects) perms[s].publish.add(x);
  };

  // Only the gateway turns HTTP into route messages (the caller it names is trusted by the owner).
  // Whoever answers a subject may reply (NATS allows a reply to any request it received, on its reply
  // subject) and send its callers' requests working signals (`<reply subject>.w` in their inboxes: a
  // 4-token subject no reply uses, so a signal can never pass for an answer), and may publish the probe
  // by which it learns that this configuration lets it send them.
  const answers = (subject: string, callers: BusService[]) => {
    const owner = perms[ownerOf(subject)];
    owner.subscribe.add(subject);
    owner.allowResponses = true;
    owner.publish.add(WORKING_PROBE_SUBJECT);
    for (const c of callers) owner.publish.add(`${inboxPrefix(c)}.*.*${WORKING_SUFFIX}`);
  };
  for (const r of routes) {
    perms.gateway.publish.add(r.subject);
    answers(r.subject, ['gateway']);
  }
  for (const [key, m] of Object.entries(messages)) {
    const senders = MESSAGE_SENDERS[key as keyof typeof messages];
    answers(m.subject, senders);
    for (const s of senders) perms[s].publish.add(m.subject);
  }
  const stream = EVENTS_STREAM;
  for (const [event, emitters] of Object.entries(EVENT_EMITTERS)) {
    for (const s of [emitters].flat()) perms[s].publish.add(eventSubject(event as EventName));
  }
  // Every service's outbox relay (and each consumer) makes sure the stream exists with its configuration:
  // whichever starts first creates it. Nothing else of JetStream is theirs (no purge, delete, other streams).
  for (const s of BUS_SERVICES) {
    if (s !== 'gateway') js(s, '$JS.API.INFO', `$JS.API.STREAM.INFO.${stream}`, `$JS.API.STREAM.CREATE.${stream}`, `$JS.API.STREAM.UPDATE.${stream}`);
  }
  for (const c of Object.values(EVENT_CONSUMERS)) {
    const s: BusService = c.service;
    js(
      s,
      '$JS.API.INFO',
      `$JS.API.STREAM.INFO.${stream}`,
      `$JS.API.CONSUMER.CREATE.${stream}.${c.durable}`,
      `$JS.API.CONSUMER.CREATE.${stream}.${c.durable}.>`,
      `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.${c.durable}`,
      `$JS.API.CONSUMER.INFO.${stream}.${c.durable}`,
      `$JS.API.CONSUMER.MSG.NEXT.${stream}.${c.durable}`,
      `$JS.ACK.${stream}.${c.durable}.>`,
    );
  }
  if (opts.devMode) {
    const kv = `KV_${DEV_CLOCK_BUCKET}`;
    for (const s of BUS_SERVICES) {
      if (s === 'gateway') continue;
      js(
        s,
        '$JS.API.INFO',
        `$JS.API.STREAM.INFO.${kv}`,
        `$JS.API.STREAM.CREATE.${kv}`,
        `$JS.API.STREAM.MSG.GET.${kv}`,
        `$JS.API.DIRECT.GET.${kv}.>`,
        `$JS.API.CONSUMER.CREATE.${kv}`,
        `$JS.API.CONSUMER.CREATE.${kv}.>`,
        `$JS.API.CONSUMER.DELETE.${kv}.>`,
        `$JS.FC.${kv}.>`,
      );
      if (DEV_CLOCK_WRITERS.includes(s)) js(s, `$KV.${DEV_CLOCK_BUCKET}.>`);
    }
  }
  return Object.fromEntries(
    BUS_SERVICES.map((s) => [s, { publish: [...perms[s].publish].sort(), subscribe: [...perms[s].subscribe].sort(), allowResponses: perms[s].allowResponses }]),
  ) as Record<BusService, BusPermission>;
}
