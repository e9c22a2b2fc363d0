// The cluster fault run: a 3-server NATS JetStream cluster on loopback (EVENTS stream and the dev clock's
// KV bucket replicated 3 times, every service with its own NATS user), two replicas of every service on a
// database of its own (a role per service), checkouts, renewals and webhook deliveries driven through both
// gateways, and at random moments one NATS server and one replica of every service killed with SIGKILL.
// It then proves: every payment applied exactly once, one renewal per subscription, every event in the
// stream once, one delivery per (endpoint, event), all delivered, and how long requests failed.
//
//   npm run build && node bench/cluster.mjs [--subscriptions 30] [--seed 42]
// Needs nats-server on the PATH and PostgreSQL at DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres).
// Exit code 0 when every check holds. Not part of `npm test` (it takes a few minutes on 2 cores).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { API_PREFIX, createWallet, findNatsServer, freePort, startService, stopChild, waitFor } from '../scripts/stack.mjs';
import { natsPasswords, natsServerConfig, passwordVar } from '../scripts/nats-config.mjs';
import { dbUrlVar, dropDbRoles, provisionDbRoles } from '../scripts/db-roles.mjs';

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const N = arg('subscriptions', 30);
let seed = arg('seed', Date.now() % 100000);
const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.log(`[${new Date().toISOString().slice(11, 23)}]`, ...a);
const cleanups = [];

async function natsCluster(dir, passwords) {
  const bin = findNatsServer();
  if (!bin) throw new Error('nats-server not found');
  const nodes = [];
  for (let i = 0; i < 3; i++) nodes.push({ name: `n${i}`, port: await freePort(), clusterPort: await freePort() });
  const start = (n) => {
    const conf = join(dir, `${n.name}.conf`);
    mkdirSync(join(dir, n.name), { recursive: true });
    writeFileSync(
      conf,
      natsServerConfig({
        port: n.port,
        storeDir: join(dir, n.name),
        devMode: true,
        serverName: n.name,
        cluster: { name: 'sb', port: n.clusterPort, routes: nodes.filter((o) => o !== n).map((o) => `nats://127.0.0.1:${o.clusterPort}`) },
      }),
    );
    n.child = spawn(bin, ['-c', conf, '-l', join(dir, `${n.name}.log`)], { stdio: 'ignore', env: { ...process.env, ...passwords } });
  };
  nodes.forEach(start);
  const url = nodes.map((n) => `nats://127.0.0.1:${n.port}`).join(',');
  // JetStream answers once the cluster has a meta leader.
  await waitFor(
    async () => {
      const nc = await connect({ servers: url.split(','), user: 'operator', pass: passwords[passwordVar('operator')], timeout: 1000 }).catch(() => undefined);
      if (!nc) return false;
      try {
        await (await jetstreamManager(nc)).getAccountInfo();
        return true;
      } catch {
        return false;
      } finally {
        await nc.close();
      }
    },
    60_000,
    'NATS cluster',
  );
  cleanups.push(() => Promise.all(nodes.map((n) => stopChild(n.child))));
  return { nodes, url, start };
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'sb-cluster-'));
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
  const dbName = `sb_cluster_${Date.now().toString(36)}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  await admin.end();
  const dbUrl = Object.assign(new URL(ADMIN_URL), { pathname: `/${dbName}` }).toString();
  cleanups.push(async () => {
    const c = new pg.Client({ connectionString: ADMIN_URL });
    await c.connect();
    await c.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
    await c.end();
    await dropDbRoles(ADMIN_URL, { prefix: `${dbName}_` });
  });
  const roles = await provisionDbRoles(dbUrl, { prefix: `${dbName}_` });

  const passwords = natsPasswords();
  const nats = await natsCluster(dir, passwords);
  log(`NATS cluster of 3 at ${nats.url}`);

  const hooks = new Map(); // webhook-id -> times received
  const receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const id = String(req.headers['webhook-id']);
      hooks.set(id, (hooks.get(id) ?? 0) + 1);
      res.end('ok');
    });
  });
  const receiverPort = await new Promise((r) => receiver.listen(0, '127.0.0.1', () => r(receiver.address().port)));
  cleanups.push(async () => receiver.close());

  const env = {
    ...Object.fromEntries(Object.entries(roles).map(([s, u]) => [dbUrlVar(s), u])),
    ...passwords,
    DATABASE_URL: dbUrl,
    NATS_URL: nats.url,
    NATS_REPLICAS: '3',
    DEV_MODE: '1',
    LIGHTNING_PROVIDER: 'dev',
    LOG_LEVEL: 'warn',
    SECRETS_KEY: randomBytes(32).toString('hex'),
    SCHEDULER_INTERVAL_MS: '500',
    PAYMENTS_SWEEP_INTERVAL_MS: '500',
    NOTIFIER_POLL_INTERVAL_MS: '500',
    WEBHOOK_ALLOW_PRIVATE: '1',
    BUS_TIMEOUT_MS: '10000',
    RATE_LIMIT_KEY_PER_SECOND: '100000',
    RATE_LIMIT_PUBLIC_POST_PER_MINUTE: '100000',
    RATE_LIMIT_PUBLIC_GET_PER_MINUTE: '100000',
  };
  // A cluster just formed may still be electing the leaders of new streams: a service whose first
  // JetStream request timed out exits, and is started again (as a supervisor would).
  const start = async (name) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await startService(name, env);
      } catch (err) {
        if (attempt === 3) throw err;
        log(`${name} did not start (${String(err.message).split('\n')[1] ?? err.message}); again`);
      }
    }
  };
  const replicas = {};
  for (const name of ['billing', 'payments', 'nwc', 'notifier', 'gateway']) {
    replicas[name] = [await start(name), await start(name)];
    log(`${name}: 2 replicas`);
  }
  cleanups.push(() =>
    Promise.all(
      Object.values(replicas)
        .flat()
        .map((s) => s.stop()),
    ),
  );
  const wallet = await createWallet(dbUrl, 'cluster');
  const gateways = replicas.gateway.map((g) => `${g.url}${API_PREFIX}`);

  // Requests go to either gateway; a failed one (503, connection refused) is retried on the other.
  let failedSince = 0;
  let longestOutageMs = 0;
  async function call(method, path, body, key) {
    for (let attempt = 0; attempt < 120; attempt++) {
      const base = gateways[(attempt + Math.floor(random() * 2)) % gateways.length];
      try {
        const res = await fetch(`${base}${path}`, {
          method,
          headers: { 'content-type': 'application/json', ...(key ? { 'x-api-key': key } : {}) },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(15_000),
        });
        if (res.status < 500) {
          if (failedSince) longestOutageMs = Math.max(longestOutageMs, Date.now() - failedSince);
          failedSince = 0;
          return { status: res.status, body: await res.json().catch(() => undefined) };
        }
      } catch {
        /* a killed gateway */
      }
      failedSince ||= Date.now();
      await sleep(250);
    }
    throw new Error(`${method} ${path} kept failing`);
  }

  const endpoint = await call('POST', '/webhook-endpoints', { url: `http://127.0.0.1:${receiverPort}/hook` }, wallet.admin_key);
  if (endpoint.status !== 201) throw new Error(`webhook endpoint: ${endpoint.status}`);
  const plan = (await call('POST', '/plans', { name: 'Cluster', amount_sats: 1000, interval: 'monthly' }, wallet.admin_key)).body;

  // Faults at random moments while the checkouts run: one NATS server and one replica of each service.
  const faults = [];
  const faultRun = (async () => {
    const victims = [
      ['nats', () => stopChild(nats.nodes[Math.floor(random() * 3)].child, 'SIGKILL')],
      ...Object.keys(replicas).map((name) => [name, () => replicas[name][Math.floor(random() * 2)].stop()]),
    ];
    for (const [name, kill] of victims.sort(() => random() - 0.5)) {
      await sleep(500 + random() * 3000);
      faults.push({ name, at: Date.now() });
      log(`killing one ${name}`);
      if (name === 'nats') await kill();
      else {
        const i = replicas[name].findIndex((s) => s.child.exitCode === null);
        await stopChild(replicas[name][i].child, 'SIGKILL');
      }
    }
  })();

  const subs = [];
  for (let i = 0; i < N; i++) {
    const co = await call('POST', '/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: `c${i}@example.com` });
    if (co.status !== 201) throw new Error(`checkout ${i}: ${co.status} ${JSON.stringify(co.body)}`);
    const paid = await call('POST', `/dev/payments/${co.body.payment_id}/pay`);
    if (paid.status !== 200) throw new Error(`pay ${i}: ${paid.status} ${JSON.stringify(paid.body)}`);
    subs.push(co.body);
  }
  await faultRun;
  log(`${N} checkouts paid; faults: ${faults.map((f) => f.name).join(', ')}`);

  const db = new pg.Pool({ connectionString: dbUrl, max: 2 });
  cleanups.push(() => db.end());
  const count = async (sql, params) => (await db.query(sql, params)).rows[0].n;
  const settle = async (what, check, ms = 60_000) => {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      if (await check()) return;
      await sleep(500);
    }
    // What the survivors said meanwhile, to see why.
    for (const svc of Object.values(replicas)
      .flat()
      .filter((x) => x.child.exitCode === null && x.child.signalCode === null)) {
      for (const line of svc.lines.slice(-5)) log(`  ${svc.name}: ${line.slice(0, 300)}`);
    }
    throw new Error(`not settled: ${what}`);
  };
  const ids = subs.map((s) => s.subscription_id);
  await settle(
    'all active',
    async () => (await count(`SELECT count(*)::int AS n FROM billing.subscriptions WHERE id = ANY($1) AND status = 'active'`, [ids])) === N,
  );

  // A month later: each subscription renews once (the renewal payment is paid as it appears).
  const periodEnd = Object.fromEntries(
    (await db.query(`SELECT id, current_period_end FROM billing.subscriptions WHERE id = ANY($1)`, [ids])).rows.map((r) => [r.id, r.current_period_end]),
  );
  const moved = await call('POST', '/dev/clock', { advance_seconds: 29 * 86_400 }, wallet.admin_key);
  if (moved.status !== 200) throw new Error(`dev clock: ${moved.status}`);
  await settle(
    'renewal payments',
    async () => (await count(`SELECT count(*)::int AS n FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal'`, [ids])) >= N,
    120_000,
  );
  for (const r of (await db.query(`SELECT id FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal' AND status = 'pending'`, [ids]))
    .rows) {
    const paid = await call('POST', `/dev/payments/${r.id}/pay`);
    if (paid.status !== 200) throw new Error(`renewal pay: ${paid.status}`);
  }
  await settle(
    'renewed',
    async () =>
      (await count(`SELECT count(*)::int AS n FROM billing.subscriptions WHERE id = ANY($1) AND current_period_start >= $2`, [
        ids,
        Math.min(...Object.values(periodEnd)),
      ])) === N,
    120_000,
  );

  // The proof.
  const results = {};
  const check = (name, ok, detail) => {
    results[name] = { ok, ...detail };
    log(`${ok ? 'ok  ' : 'FAIL'} ${name} ${JSON.stringify(detail)}`);
  };
  const paidPayments = (await db.query(`SELECT id FROM payments.payments WHERE subscription_id = ANY($1) AND status = 'paid'`, [ids])).rows.map((r) => r.id);
  const applied = (
    await db.query(`SELECT payment_id, count(*)::int AS n FROM billing.applied_payments WHERE payment_id = ANY($1) GROUP BY payment_id`, [paidPayments])
  ).rows;
  check('payments applied once', paidPayments.length === 2 * N && applied.length === paidPayments.length && applied.every((r) => r.n === 1), {
    paid: paidPayments.length,
    applied: applied.length,
  });
  // Exactly one renewal paid per subscription and none left open. (A renewal invoice may have been
  // replaced: the dev clock reaches the services up to a second apart, and an invoice payments issued
  // on the old time looks expired to billing; the replaced one is expired, never paid.)
  const renewals = (
    await db.query(
      `SELECT subscription_id, count(*) FILTER (WHERE status = 'paid')::int AS paid, count(*) FILTER (WHERE status = 'pending')::int AS open, count(*)::int AS n
         FROM payments.payments WHERE subscription_id = ANY($1) AND purpose = 'renewal' GROUP BY subscription_id`,
      [ids],
    )
  ).rows;
  check('one renewal per subscription', renewals.length === N && renewals.every((r) => r.paid === 1 && r.open === 0), {
    subscriptions: renewals.length,
    doubled: renewals.filter((r) => r.paid > 1).length,
    replaced_invoices: renewals.reduce((a, r) => a + r.n - 1, 0),
  });
  const periods = (await db.query(`SELECT id, current_period_end FROM billing.subscriptions WHERE id = ANY($1)`, [ids])).rows;
  check(
    'each period advanced once',
    periods.every((p) => p.current_period_end > periodEnd[p.id] && p.current_period_end - periodEnd[p.id] < 32 * 86_400),
    { subscriptions: periods.length },
  );

  const outbox = await count(`SELECT (SELECT count(*) FROM billing.outbox) + (SELECT count(*) FROM payments.outbox) + (SELECT count(*) FROM nwc.outbox) AS n`);
  await settle(
    'outboxes published',
    async () =>
      Number(
        await count(
          `SELECT (SELECT count(*) FROM billing.outbox WHERE published_at IS NULL) + (SELECT count(*) FROM payments.outbox WHERE published_at IS NULL) AS n`,
        ),
      ) === 0,
  );
  const nc = await connect({ servers: nats.url.split(','), user: 'operator', pass: passwords[passwordVar('operator')] });
  const stream = await (await jetstreamManager(nc)).streams.info('EVENTS');
  await nc.close();
  check('every event in the stream once (replicated on 3)', Number(stream.state.messages) === Number(outbox) && stream.config.num_replicas === 3, {
    outbox: Number(outbox),
    stream: stream.state.messages,
    replicas: stream.config.num_replicas,
  });

  // Events a killed notifier had taken come again after their ack wait (30 s), deliveries it had claimed
  // after their lease (70 s): wait for every event to have its delivery, and every delivery to be done.
  const events = (await db.query(`SELECT event_id FROM billing.outbox UNION ALL SELECT event_id FROM payments.outbox`)).rows.map((r) => r.event_id);
  await settle(
    'deliveries done',
    async () =>
      (await count(`SELECT count(DISTINCT event_id)::int AS n FROM notifier.deliveries WHERE replay_of IS NULL`)) >= events.length &&
      (await count(`SELECT count(*)::int AS n FROM notifier.deliveries WHERE status <> 'delivered'`)) === 0,
    180_000,
  );
  const deliveries = (await db.query(`SELECT event_id, count(*)::int AS n FROM notifier.deliveries WHERE replay_of IS NULL GROUP BY event_id`)).rows;
  const missing = events.filter((e) => !hooks.has(e));
  check('one delivery per event, every event delivered', deliveries.length === events.length && deliveries.every((d) => d.n === 1) && missing.length === 0, {
    events: events.length,
    deliveries: deliveries.length,
    missing: missing.length,
    // Standard Webhooks is at least once: a notifier killed between the POST and recording it sends again (same webhook-id).
    resent_same_id: [...hooks.values()].filter((n) => n > 1).length,
  });
  check('recovery within seconds', longestOutageMs < 30_000, { longest_failing_ms: longestOutageMs });

  const failed = Object.entries(results).filter(([, r]) => !r.ok);
  log(failed.length ? `FAILED: ${failed.map(([n]) => n).join(', ')}` : 'cluster fault run passed: 0 lost, 0 doubled');
  return failed.length ? 1 : 0;
}

let code = 1;
try {
  code = await main();
} catch (err) {
  console.error(err?.stack ?? err);
} finally {
  for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
}
process.exit(code);
