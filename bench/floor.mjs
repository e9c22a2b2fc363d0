// The floor: the least any implementation of GET/POST /plans (and of a Lightning checkout, see
// lightningCheckout) can cost on this machine with this design.
// A bare node:http server (no framework, no auth, no validation, no tracing, no logs) that, per request,
// does one NATS request/reply to a bare NATS responder, which runs the same SQL as billing's PlansRepo
// with a pg.Pool of the same size, as named statements like the services' store. Like the real system
// (gateway + billing), the HTTP side and the responder run as two processes: `node bench/floor.mjs` forks itself with FLOOR_ROLE=responder.
//
// env: NATS_URL, DATABASE_URL, FLOOR_WALLET (the wallet every request acts for), FLOOR_PORT (0 = free),
//      DB_POOL_MAX (default 10, as billing). Prints one line `FLOOR_READY <port> <responder pid>` on stdout when serving.
// FLOOR_ROLE=sweep is the floor of a renewal sweep instead (sweepFloor: DATABASE_URL, FLOOR_PLAN, FLOOR_NOW).
//
// The HTTP floor's connections keep PostgreSQL's default plan choice (a generic plan after five runs),
// as the services' look-ups by key do; the services plan every other statement (the checkout's
// transactions) for its values (see the README's Decisions). The sweep's floor plans as the services do:
// the generic plans of its batch statements cost PostgreSQL more at 100k rows.
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { createHash, randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { enqueueEvent, newId, SecretBox } from '@sb/runtime';
import { planSql, PlansRepo } from '../services/billing/dist/store/plans.repo.js';
import { SubscribersRepo } from '../services/billing/dist/store/subscribers.repo.js';
import { SubscriptionsRepo } from '../services/billing/dist/store/subscriptions.repo.js';
import { newSubscriptionRow } from '../services/billing/dist/subscribe.js';
import { RENEWAL_BATCH_MAX } from '@sb/contracts';
import { dueNow } from '../services/billing/dist/domain/schedule.js';
import { RENEWAL_LANES, renewalAsk, renewalEvents, renewalRow, SWEEP_PASS_ROWS } from '../services/billing/dist/scheduler.js';
import { emitMany } from '../services/billing/dist/transitions.js';
import { checkoutOf } from '../services/payments/dist/domain/checkout.js';
import { toPayment } from '../services/payments/dist/domain/payments.js';
import { DevLightningProvider } from '../services/payments/dist/providers/dev.js';
import { PaymentsRepo } from '../services/payments/dist/store/payments.repo.js';

const SUBJECT_GET = 'floor.plans.get';
const SUBJECT_CREATE = 'floor.plans.create';
const SUBJECT_SUBSCRIBE = 'floor.public.subscribe';
const QUEUE = 'floor';

// The billing store's own statements (the floor runs exactly what billing runs).
const SQL = planSql('billing');

const env = (name, def) => {
  const v = process.env[name] ?? def;
  if (v === undefined) throw new Error(`floor: ${name} is required`);
  return v;
};

/** A pool of the size the services use. Idle connections are kept: no reconnecting between scenarios. */
function floorPool(options) {
  pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));
  const pool = new pg.Pool({
    connectionString: env('DATABASE_URL'),
    max: Number(env('DB_POOL_MAX', '10')),
    idleTimeoutMillis: 0,
    application_name: 'floor',
    options,
  });
  pool.on('error', () => undefined);
  return pool;
}

/** `fn` in one transaction on a connection of `pool`, its statements named. */
async function inTx(pool, fn) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(named(client));
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

// Named statements, as the services' store makes them (each text parsed once per connection).
const names = new Map();
const named = (q) => ({
  query: (text, values) => {
    let name = names.get(text);
    if (name === undefined) names.set(text, (name = `fc${names.size}`));
    return q.query({ name, text, values });
  },
});

async function responder() {
  const pool = floorPool();
  const nc = await connect({ servers: env('NATS_URL'), name: 'floor-responder' });
  const reply = (msg, status, data) => msg.respond(JSON.stringify({ status, data }));

  nc.subscribe(SUBJECT_GET, {
    queue: QUEUE,
    callback: (err, msg) => {
      if (err) return;
      const { wallet, id } = msg.json();
      pool.query({ name: 'floor_get', text: SQL.get, values: [id, wallet] }).then(
        ({ rows }) => (rows[0] ? reply(msg, 200, rows[0]) : reply(msg, 404, { detail: 'Plan not found' })),
        (e) => reply(msg, 500, { detail: e.message }),
      );
    },
  });
  nc.subscribe(SUBJECT_CREATE, {
    queue: QUEUE,
    callback: (err, msg) => {
      if (err) return;
      const { wallet, body } = msg.json();
      const now = Math.floor(Date.now() / 1000);
      const p = {
        id: `plan_${randomBytes(13).toString('hex').slice(0, 26)}`,
        wallet,
        name: body.name,
        description: body.description ?? null,
        amount_sats: body.amount_sats,
        interval: body.interval,
        trial_days: body.trial_days ?? 0,
        grace_period_days: body.grace_period_days ?? 0,
        allow_lightning: body.allow_lightning ?? true,
        allow_onchain: body.allow_onchain ?? false,
        allow_nwc: body.allow_nwc ?? false,
        allow_cardproc: body.allow_cardproc ?? false,
        allow_walletproc: body.allow_walletproc ?? false,
        watchonly_wallet_id: body.watchonly_wallet_id ?? null,
        cardproc_account_id: body.cardproc_account_id ?? null,
        walletproc_merchant_id: body.walletproc_merchant_id ?? null,
        created_at: now,
        updated_at: now,
        is_deleted: false,
      };
      pool.query({ name: 'floor_insert', text: SQL.insert, values: SQL.insertValues(p) }).then(
        () => reply(msg, 201, p),
        (e) => reply(msg, 500, { detail: e.message }),
      );
    },
  });
  const checkout = lightningCheckout(pool);
  nc.subscribe(SUBJECT_SUBSCRIBE, {
    queue: QUEUE,
    callback: (err, msg) => {
      if (err) return;
      checkout(msg.json()).then(
        (answer) => reply(msg, 201, answer),
        (e) => reply(msg, e.status ?? 500, { detail: e.message }),
      );
    },
  });
  await nc.flush();
  process.send?.('ready');

  const stop = async () => {
    await nc.drain().catch(() => undefined);
    await pool.end().catch(() => undefined);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.on('disconnect', stop); // the parent went away
}

/**
 * The least a Lightning checkout (`POST /public/subscribe`) can cost with this design: what must be durable
 * before the answer, by the services' own store statements and in their transactions (the public plan
 * read; the plan's checkout lock, the subscriber, the subscription and its `subscription.created` event in
 * the outbox, in one transaction; the payment row), the BOLT11 invoice signed by the dev provider's code
 * and its QR code made by the payments service's code, behind one NATS hop. Left out, as the floor of
 * GET/POST leaves out what is not the operation itself: the second hop (billing to payments), validation,
 * rate limits, tracing and logs, the contact-method and duplicate-checkout checks, and the read of the
 * subscription after its payment. The event's way on (billing's outbox relay, JetStream, the notifier)
 * is the running services' work, as for a real checkout, and counted in the floor's CPU too.
 */
function lightningCheckout(pool) {
  const plans = new PlansRepo('billing');
  const subscribers = new SubscribersRepo('billing');
  const subscriptions = new SubscriptionsRepo('billing');
  const payments = new PaymentsRepo('payments');
  const clock = { nowMs: () => Date.now() };
  const lightning = new DevLightningProvider(clock, async () => undefined);
  const box = new SecretBox(randomBytes(32).toString('hex'));
  const db = named(pool);
  const notFound = Object.assign(new Error('Plan not found'), { status: 404 });
  return async ({ plan_id, email }) => {
    const plan = await plans.getPublic(db, plan_id);
    if (!plan) throw notFound;
    const nowMs = Date.now();
    const now = Math.floor(nowMs / 1000);
    const token = randomBytes(32).toString('hex');
    const sub = await inTx(pool, async (tx) => {
      await plans.lockForCheckout(tx, plan.id);
      const { row: subscriber } = await subscribers.upsert(tx, {
        id: newId('cus_', nowMs),
        wallet_id: plan.wallet,
        email,
        name: null,
        messenger: null,
        nostr: null,
        contact_preference: null,
        token_hash: createHash('sha256').update(token).digest('hex'),
        token_sealed: box.seal(token),
        created_at: now,
      });
      const sub = newSubscriptionRow(
        plan,
        subscriber.id,
        { payment_method: 'lightning', receive_confirmations: true, receive_reminders: true, checkout_key: null },
        nowMs,
      );
      if (!(await subscriptions.insertIfNew(tx, sub))) throw Object.assign(new Error('Already subscribed'), { status: 409 });
      await enqueueEvent(tx, 'billing', clock, plan.wallet, 'subscription.created', {
        subscription_id: sub.id,
        plan_id: plan.id,
        plan_name: plan.name,
        subscriber_email: email,
        status: sub.status,
        amount_sats: sub.amount_sats,
        interval: sub.interval,
        current_period_start: sub.current_period_start,
        current_period_end: sub.current_period_end,
        payment_method: 'lightning',
        trial: false,
        notify_subscriber: false,
      });
      return sub;
    });
    const expiry = 3600;
    const invoice = await lightning.createInvoice({ amount_sats: plan.amount_sats, memo: `${plan.name} (${plan.interval})`, expiry_seconds: expiry });
    const [payment] = await payments.insertMany(db, [
      pendingLightningPayment({ sub, plan_name: plan.name, purpose: 'checkout', invoice, nowMs, idempotency_key: `checkout:${sub.id}` }),
    ]);
    const c = await checkoutOf(payment);
    return {
      subscription_id: sub.id,
      status: sub.status,
      payment_id: c.payment_id,
      payment_request: c.payment_request,
      payment_hash: c.payment_hash,
      qr_codes: c.qr_codes,
      expires_at: c.expires_at,
      manage_url: `http://127.0.0.1/subscriptions_manager/manage?token=${token}`,
    };
  };
}

/**
 * A pending Lightning payment as the payments service stores it (its `open()`), for an invoice of the
 * dev provider: what both floors insert.
 */
function pendingLightningPayment({ sub, plan_name, purpose, invoice, nowMs, idempotency_key }) {
  return {
    payment: {
      id: newId('pay_', nowMs),
      wallet_id: sub.wallet_id,
      subscription_id: sub.id,
      plan_id: sub.plan_id,
      plan_name,
      amount_sats: sub.amount_sats,
      status: 'pending',
      payment_method: 'lightning',
      purpose,
      payment_request: invoice.payment_request,
      payment_hash: invoice.payment_hash,
      provider: 'dev',
      provider_ref: invoice.provider_ref,
      onchain_address: null,
      onchain_txid: null,
      checkout_url: null,
      amount_fiat: null,
      currency: null,
      fiat_rate: null,
      cardproc_payment_id: null,
      walletproc_order_id: null,
      failure_reason: null,
      watchonly_wallet_id: null,
      derivation_index: null,
      expires_at: invoice.expires_at,
      paid_at: null,
      created_at: Math.floor(nowMs / 1000),
      idempotency_key,
    },
    devPreimage: invoice.dev_preimage,
  };
}

/**
 * The least a renewal sweep can cost with this design (`FLOOR_ROLE=sweep`): every subscription of
 * FLOOR_PLAN due at FLOOR_NOW gets its renewal payment, by the services' own store statements in their
 * transactions and in the scheduler's passes, batches and lanes: the due rows; per batch the payments'
 * idempotency look-up, the dev provider's signed invoices and one multi-row insert, then one billing
 * transaction of the compare-and-set saves, the renewal records and the events (`renewal.reminder`, and
 * `subscription.trial_ending` at a trial's end) in the outbox. Left out: the bus between billing and
 * payments (billing's and payments' work share one process here), message validation, tracing and logs.
 * The events' way on (billing's relay, JetStream, the notifier) is the running services' work, as for a
 * real sweep. After `FLOOR_SWEEP_READY` it waits for a line on stdin, sweeps, prints
 * `FLOOR_SWEEP_DONE <renewals>` and waits for SIGTERM (see the end).
 */
async function sweepFloor() {
  const pool = floorPool('-c plan_cache_mode=force_custom_plan');
  const planId = env('FLOOR_PLAN');
  const now = Number(env('FLOOR_NOW'));
  const policy = { dunning_days: Number(env('DUNNING_DAYS', '14')) };
  const clock = { nowMs: () => now * 1000 };
  const d = { subscriptions: new SubscriptionsRepo('billing', policy), clock };
  const plans = new PlansRepo('billing');
  const payments = new PaymentsRepo('payments');
  const lightning = new DevLightningProvider(clock, async () => undefined);
  const db = named(pool);
  const invoiceMaxExpiry = Number(env('INVOICE_MAX_EXPIRY_S', '86400'));

  /** One batch of renewals (`{ s, due }`, as the scheduler's `issueRenewals` takes them). */
  const renew = async (batch, plan) => {
    const asks = batch.map(({ s, due }) => renewalAsk(s, now, due.replaces, plan, policy));
    const known = await payments.byIdempotencyKeys(
      db,
      asks.map((a, i) => ({ wallet_id: batch[i].s.wallet_id, idempotency_key: a.idempotency_key })),
    );
    if (known.length) throw new Error(`floor sweep: ${known.length} renewal payments exist already`);
    const rows = await Promise.all(
      batch.map(async ({ s }, i) => {
        const invoice = await lightning.createInvoice({
          amount_sats: s.amount_sats,
          memo: asks[i].description,
          expiry_seconds: Math.min(asks[i].expires_at - now, invoiceMaxExpiry),
        });
        return pendingLightningPayment({
          sub: s,
          plan_name: plan.name,
          purpose: 'renewal',
          invoice,
          nowMs: now * 1000,
          idempotency_key: asks[i].idempotency_key,
        });
      }),
    );
    const stored = new Map((await payments.insertMany(db, rows)).map((p) => [p.idempotency_key, p]));
    const issued = await Promise.all(
      batch.map(async (r, i) => {
        const p = stored.get(asks[i].idempotency_key);
        const created = { payment: toPayment(p), checkout: await checkoutOf(p) };
        return { ...r, row: renewalRow(r, created, now), created };
      }),
    );
    await inTx(pool, async (tx) => {
      const saved = await d.subscriptions.saveMany(
        tx,
        issued.map((x) => x.row),
      );
      if (saved.size !== issued.length) throw new Error('floor sweep: a subscription moved under it');
      await d.subscriptions.recordRenewalPayments(
        tx,
        issued.map(({ s, created }) => ({ subscription_id: s.id, payment_id: created.payment.id, period_end: s.current_period_end })),
      );
      await emitMany(
        d,
        tx,
        issued.flatMap((x) => renewalEvents(x, now, policy)),
      );
    });
  };

  // An exit of its own on SIGTERM, so that a CPU profile (--cpu-prof) is written.
  process.on('SIGTERM', () => void pool.end().finally(() => process.exit(0)));
  process.stdout.write('FLOOR_SWEEP_READY\n');
  await new Promise((resolve) => process.stdin.once('data', resolve));
  let renewed = 0;
  for (;;) {
    const due = (await d.subscriptions.due(db, now, SWEEP_PASS_ROWS)).map((s) => ({ s, due: dueNow(s, now, policy) }));
    if (!due.length) break;
    const other = due.find(({ s, due }) => s.plan_id !== planId || due.kind !== 'renewal_payment');
    if (other) throw new Error(`floor sweep: ${other.s.id} is due and is not a renewal of ${planId}`);
    const plan = await plans.get(db, due[0].s.wallet_id, planId);
    let next = 0;
    const lane = async () => {
      while (next < due.length) await renew(due.slice(next, (next += RENEWAL_BATCH_MAX)), plan);
    };
    await Promise.all(Array.from({ length: RENEWAL_LANES }, lane));
    renewed += due.length;
  }
  // Its connections stay open until the bench stops it: a backend that exits before the bench's last
  // reading of the CPU would drop out of it.
  process.stdout.write(`FLOOR_SWEEP_DONE ${renewed}\n`);
}

async function httpSide() {
  const wallet = env('FLOOR_WALLET');
  const child = fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, FLOOR_ROLE: 'responder' }, stdio: 'inherit' });
  await new Promise((resolve, reject) => {
    child.once('message', (m) => (m === 'ready' ? resolve() : reject(new Error(`responder said ${m}`))));
    child.once('exit', (code) => reject(new Error(`floor responder exited with ${code}`)));
  });

  const nc = await connect({ servers: env('NATS_URL'), name: 'floor-http' });
  const send = (res, status, body) => {
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
  const roundTrip = (res, subject, payload) =>
    nc.request(subject, JSON.stringify(payload), { timeout: 5000 }).then(
      (m) => {
        const r = m.json();
        send(res, r.status, JSON.stringify(r.data));
      },
      () => send(res, 503, '{"detail":"bus"}'),
    );

  const jsonBody = (req, res, then) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let body;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return send(res, 400, '{"detail":"Malformed JSON body"}');
      }
      void then(body);
    });
  };

  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url.startsWith('/plans/')) {
      return void roundTrip(res, SUBJECT_GET, { wallet, id: req.url.slice('/plans/'.length) });
    }
    if (req.method === 'POST' && req.url === '/public/subscribe') {
      return jsonBody(req, res, (body) => roundTrip(res, SUBJECT_SUBSCRIBE, { plan_id: body.plan_id, email: body.email }));
    }
    if (req.method === 'POST' && req.url === '/plans') {
      return jsonBody(req, res, (body) => roundTrip(res, SUBJECT_CREATE, { wallet, body }));
    }
    if (req.url === '/readyz') return send(res, 200, '{"status":"ok"}');
    send(res, 404, '{"detail":"Not Found"}');
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((resolve) => server.listen(Number(env('FLOOR_PORT', '0')), '127.0.0.1', resolve));
  // The responder's pid too: the bench counts the CPU of both processes.
  process.stdout.write(`FLOOR_READY ${server.address().port} ${child.pid}\n`);

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    server.close();
    server.closeAllConnections();
    await nc.drain().catch(() => undefined);
    if (child.exitCode === null && child.signalCode === null) {
      await new Promise((resolve) => {
        const t = setTimeout(() => child.kill('SIGKILL'), 3000);
        child.once('exit', () => (clearTimeout(t), resolve()));
        child.kill('SIGTERM');
      });
    }
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

const main = { responder, sweep: sweepFloor }[process.env.FLOOR_ROLE] ?? httpSide;
main().catch((err) => {
  process.stderr.write(`floor (${process.env.FLOOR_ROLE ?? 'http'}) failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
