import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, AckPolicy } from '@nats-io/jetstream';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { busPermissions, EVENTS_STREAM, inboxPrefix, routes } from '@sb/contracts';
import { client } from './support/http.js';
import { newWallets, type WalletKeys } from './support/stack.js';
import { passwordVar } from '../scripts/nats-config.mjs';

const stack = inject('stack');
const SERVICES = ['gateway', 'billing', 'payments', 'nwc', 'notifier'] as const;
type Service = (typeof SERVICES)[number];

/** Connects as a service (its own NATS user, its own inbox prefix, as the service itself does). */
function connectAs(user: Service, password = stack.natsPasswords[passwordVar(user)]): Promise<NatsConnection> {
  return connect({ servers: stack.natsUrl, user, pass: password, inboxPrefix: inboxPrefix(user), maxReconnectAttempts: 0 });
}

const caller = (w: WalletKeys) => ({
  caller: { wallet_id: w.id, role: 'admin' },
  params: {},
  query: {},
  body: { name: 'forged', amount_sats: 1000, interval: 'monthly' },
});
const encode = (x: unknown) => new TextEncoder().encode(JSON.stringify(x));
/** A request as Nest's NATS transport frames it (what the services answer). */
const nestRequest = (subject: string, data: unknown) => encode({ pattern: subject, data, id: 'test' });

/** A subscription the server refuses is closed with its error; one it allows stays open. */
async function subscriptionDenial(nc: NatsConnection, subject: string): Promise<string> {
  const sub = nc.subscribe(subject);
  const outcome = await Promise.race([sub.closed, new Promise<'open'>((r) => setTimeout(() => r('open'), 2000))]);
  sub.unsubscribe();
  return outcome === 'open' ? 'allowed' : String((outcome as Error | undefined)?.message ?? 'closed');
}

/** What the server says about a denied operation (nats.js raises its -ERR on the request or subscription). */
async function denial(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return String((err as Error).message);
  }
  return 'allowed';
}

describe('the bus trusts no one: each service has its own NATS user and subjects', () => {
  let wallet: WalletKeys;
  const conns: NatsConnection[] = [];
  const as = async (s: Service) => {
    const nc = await connectAs(s);
    conns.push(nc);
    return nc;
  };

  beforeAll(async () => {
    [wallet] = (await newWallets(stack.databaseUrl, 1)) as [WalletKeys];
  });
  afterAll(async () => {
    await Promise.all(conns.map((c) => c.close().catch(() => undefined)));
  });

  it('refuses a client without credentials or with a wrong password', async () => {
    expect(await denial(connect({ servers: stack.natsUrl, maxReconnectAttempts: 0 }))).toMatch(/Authorization Violation/i);
    expect(await denial(connectAs('billing', 'not-the-password'))).toMatch(/Authorization Violation/i);
  });

  it('only the gateway publishes route subjects: a service forging an admin caller is refused, nothing is created', async () => {
    const subject = 'billing.plans.create';
    expect(routes.some((r) => r.subject === subject)).toBe(true);
    for (const s of ['billing', 'payments', 'nwc', 'notifier'] as const) {
      const nc = await as(s);
      expect(await denial(nc.request(subject, nestRequest(subject, caller(wallet)), { timeout: 3000 }))).toMatch(
        /Permissions Violation for Publish to "billing\.plans\.create"/,
      );
    }
    // Another service's owner route too (payments' list of an owner's payments, asked by the notifier).
    const notifier = await as('notifier');
    expect(await denial(notifier.request('payments.payments.list', nestRequest('payments.payments.list', caller(wallet)), { timeout: 3000 }))).toMatch(
      /Permissions Violation for Publish/,
    );
    const admin = client(stack.api, wallet.admin_key);
    expect((await admin.get('/plans')).body.items).toEqual([]);

    // The same request from the gateway's user is answered (so the refusals above are the permissions).
    const gateway = await as('gateway');
    const reply = (await gateway.request(subject, nestRequest(subject, caller(wallet)), { timeout: 20_000 })).json<any>();
    expect(reply.response).toMatchObject({ ok: true, data: { name: 'forged' } });
    expect((await admin.get('/plans')).body.items.map((p: any) => p.name)).toEqual(['forged']);
  });

  it("a service cannot take another service's requests or read its replies", async () => {
    const nwc = await as('nwc');
    for (const subject of ['billing.plans.create', 'payments.internal.create_payment', `${inboxPrefix('gateway')}.>`, '>']) {
      expect(await subscriptionDenial(nwc, subject)).toMatch(/Permissions Violation for Subscription to/);
    }
    // Its own subjects it may take (the check above would pass on a server refusing everything).
    expect(await subscriptionDenial(nwc, `${inboxPrefix('nwc')}.probe`)).toBe('allowed');
    // Service-to-service messages: only their listed senders (billing asks payments for a payment; nwc may not).
    expect(await denial(nwc.request('payments.internal.create_payment', nestRequest('payments.internal.create_payment', {}), { timeout: 3000 }))).toMatch(
      /Permissions Violation for Publish/,
    );
    // An event is published only by the service that emits it: nobody but payments says a payment was received.
    const billing = await as('billing');
    expect(await denial(jetstream(billing).publish('events.payment.received', encode({})))).toMatch(/Permissions Violation for Publish/);
  });

  it("a service cannot read the event stream through another service's consumer, nor open one of its own", async () => {
    const payments = await as('payments');
    const jsm = await jetstreamManager(payments);
    // payments reads no events at all: no consumer of its own, not the notifier's, not billing's, no direct reads.
    expect(await denial(jsm.consumers.add(EVENTS_STREAM, { durable_name: 'payments-spy', ack_policy: AckPolicy.Explicit }))).toMatch(/Permissions Violation/);
    expect(await denial(jsm.consumers.info(EVENTS_STREAM, 'notifier'))).toMatch(/Permissions Violation/);
    expect(
      await denial(payments.request(`$JS.API.CONSUMER.MSG.NEXT.${EVENTS_STREAM}.notifier`, encode({ batch: 1, expires: 1_000_000_000 }), { timeout: 3000 })),
    ).toMatch(/Permissions Violation/);
    expect(await denial(jsm.streams.getMessage(EVENTS_STREAM, { seq: 1 }))).toMatch(/Permissions Violation/);
    expect(await denial(jsm.streams.purge(EVENTS_STREAM))).toMatch(/Permissions Violation/);
    expect(await subscriptionDenial(payments, 'events.>')).toMatch(/Permissions Violation for Subscription/);
    // billing may read its own durable consumer, not the notifier's (which sees every event).
    const billing = await jetstreamManager(await as('billing'));
    expect((await billing.consumers.info(EVENTS_STREAM, 'billing-payments')).name).toBe('billing-payments');
    expect(await denial(billing.consumers.info(EVENTS_STREAM, 'notifier'))).toMatch(/Permissions Violation/);
  });

  it('the generated permissions give each subject one answering service, and route subjects to the gateway alone', () => {
    const perms = busPermissions({ devMode: true });
    for (const r of routes) {
      expect(SERVICES.filter((s) => perms[s].publish.includes(r.subject))).toEqual(['gateway']);
      expect(SERVICES.filter((s) => perms[s].subscribe.includes(r.subject))).toEqual([r.subject.split('.')[0]]);
    }
    // The gateway answers one message only: a wallet's name, to the notifier alone.
    expect(perms.gateway.subscribe).toEqual([`${inboxPrefix('gateway')}.>`, 'gateway.internal.wallet_name']);
    expect(SERVICES.filter((s) => perms[s].publish.includes('gateway.internal.wallet_name'))).toEqual(['notifier']);
    for (const s of SERVICES)
      expect(perms[s].publish.some((p) => p === '>' || (p.endsWith('.>') && !p.startsWith('$JS.') && !p.startsWith('$KV.')))).toBe(false);
  });
});

describe('PostgreSQL: one role per service, rights on its own schema only', () => {
  it("a service connected with its own role reads its schema and cannot read another's", async () => {
    for (const s of SERVICES) {
      const c = new pg.Client({ connectionString: stack.serviceDbUrls[s] });
      await c.connect();
      try {
        expect((await c.query('SELECT current_user AS u')).rows[0].u).toMatch(new RegExp(`_${s}$`));
        expect((await c.query(`SELECT count(*)::int AS n FROM ${s}.schema_migrations`)).rows[0].n).toBeGreaterThan(0);
        for (const other of SERVICES.filter((o) => o !== s)) {
          expect(await denial(c.query(`SELECT * FROM ${other}.schema_migrations LIMIT 1`))).toBe(`permission denied for schema ${other}`);
        }
        expect(await denial(c.query('CREATE SCHEMA intruder'))).toMatch(/permission denied for database/);
        expect(await denial(c.query('CREATE ROLE intruder'))).toMatch(/permission denied to create role/);
      } finally {
        await c.end();
      }
    }
  });

  it("a service's role cannot become another's", async () => {
    const c = new pg.Client({ connectionString: stack.serviceDbUrls.notifier });
    await c.connect();
    try {
      const billingRole = new URL(stack.serviceDbUrls.billing!).username;
      expect(await denial(c.query(`SET ROLE ${billingRole}`))).toMatch(/permission denied to set role/);
      expect(await denial(c.query('SET ROLE postgres'))).toMatch(/permission denied to set role/);
    } finally {
      await c.end();
    }
  });
});
