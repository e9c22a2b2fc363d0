// The floor: the least any implementation of GET/POST /plans can cost on this machine with this design.
// A bare node:http server (no framework, no auth, no validation, no tracing, no logs) that, per request,
// does one NATS request/reply to a bare NATS responder, which runs the same SQL as billing's PlansRepo
// with a pg.Pool of the same size, as named statements like the services' store. Like the real system
// (gateway + billing), the HTTP side and the responder run as two processes: `node bench/floor.mjs` forks itself with FLOOR_ROLE=responder.
//
// env: NATS_URL, DATABASE_URL, FLOOR_WALLET (the wallet every request acts for), FLOOR_PORT (0 = free),
//      DB_POOL_MAX (default 10, as billing). Prints one line `FLOOR_READY <port>` on stdout when serving.
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { planSql } from '../services/billing/dist/store/plans.repo.js';

const SUBJECT_GET = 'floor.plans.get';
const SUBJECT_CREATE = 'floor.plans.create';
const QUEUE = 'floor';

// The billing store's own statements (the floor runs exactly what billing runs).
const SQL = planSql('billing');

const env = (name, def) => {
  const v = process.env[name] ?? def;
  if (v === undefined) throw new Error(`floor: ${name} is required`);
  return v;
};

async function responder() {
  pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));
  const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: Number(env('DB_POOL_MAX', '10')), application_name: 'floor' });
  pool.on('error', () => undefined);
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

  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url.startsWith('/plans/')) {
      return void roundTrip(res, SUBJECT_GET, { wallet, id: req.url.slice('/plans/'.length) });
    }
    if (req.method === 'POST' && req.url === '/plans') {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        let body;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          return send(res, 400, '{"detail":"Malformed JSON body"}');
        }
        void roundTrip(res, SUBJECT_CREATE, { wallet, body });
      });
      return;
    }
    if (req.url === '/readyz') return send(res, 200, '{"status":"ok"}');
    send(res, 404, '{"detail":"Not Found"}');
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((resolve) => server.listen(Number(env('FLOOR_PORT', '0')), '127.0.0.1', resolve));
  process.stdout.write(`FLOOR_READY ${server.address().port}\n`);

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

const main = process.env.FLOOR_ROLE === 'responder' ? responder : httpSide;
main().catch((err) => {
  process.stderr.write(`floor (${process.env.FLOOR_ROLE ?? 'http'}) failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
