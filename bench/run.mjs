// `npm run bench`: GET and POST /plans through the real stack (gateway -> NATS -> billing -> PostgreSQL)
// against a floor (bench/floor.mjs: bare node:http -> NATS -> bare responder -> same SQL), on a private
// nats-server and a fresh database that is dropped at the end.
//
// env: BENCH_DURATION (s, default 10), BENCH_CONNECTIONS (default 32), BENCH_WARMUP (s, default 2; 0 = none),
//      DATABASE_URL (admin connection; default postgres://postgres@127.0.0.1:5432/postgres),
//      BENCH_PROFILE_DIR (write a CPU profile of each service there, e.g. to open in Chrome DevTools).
// Besides rates and latencies it prints the CPU time every process on the machine (services, nats-server,
// PostgreSQL, the load generator) spent per request, delivery or renewal: the ceiling those 2 cores allow.
// Exits non-zero when a step fails or a scenario has more than 1% non-2xx responses (or errors).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:http';
import { Webhook } from 'standardwebhooks';
import autocannon from 'autocannon';
import pg from 'pg';
import { API_PREFIX, ROOT, createWallet, startNats, startService, stopChild, waitReady } from '../scripts/stack.mjs';

const DURATION = positiveInt('BENCH_DURATION', 10);
const CONNECTIONS = positiveInt('BENCH_CONNECTIONS', 32);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
const MAX_FAILURE_RATIO = 0.01;
const ADMIN_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const PLAN_BODY = JSON.stringify({ name: 'Bench', amount_sats: 1000, interval: 'monthly' });
// Logging and tracing at their defaults (info; spans on), as in production.
const SERVICE_ENV = {
  LIGHTNING_PROVIDER: 'dev',
  // The webhook receiver listens on loopback.
  WEBHOOK_ALLOW_PRIVATE: '1',
  RATE_LIMIT_KEY_PER_SECOND: '1000000',
  RATE_LIMIT_PUBLIC_POST_PER_MINUTE: '100000000',
  DEV_MODE: '1',
  SECRETS_KEY: randomBytes(32).toString('hex'),
  SCHEDULER_INTERVAL_MS: '500',
};
// Renewal sweep sizes: N due subscriptions renewed by the scheduler, to show how the cost grows with N.
const SWEEP_SIZES = (process.env.BENCH_SWEEP_SIZES ?? '10000,100000')
  .split(',')
  .map(Number)
  .filter((n) => n > 0);
/** Each sweep beside its floor (bench/floor.mjs, sweepFloor) unless BENCH_SWEEP_FLOOR=0. */
const SWEEP_FLOOR = process.env.BENCH_SWEEP_FLOOR !== '0';
/** Outgoing webhook deliveries measured (events written to the outbox at once). */
const WEBHOOK_EVENTS = positiveInt('BENCH_WEBHOOK_EVENTS', 5000);
/** Directory for a CPU profile of every service (node --cpu-prof), written when the services stop. */
const PROFILE_DIR = process.env.BENCH_PROFILE_DIR;
/** Which groups run (comma-separated): gateway, subscribe, sweep, webhooks, rss; default all. */
const ONLY = new Set((process.env.BENCH_ONLY ?? 'gateway,subscribe,sweep,webhooks,rss').split(',').map((s) => s.trim()));

/** Resident memory of a process now, in MB (Linux /proc). */
function rssMb(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Math.round(Number(m[1]) / 1024) : 0;
}

/** Processes whose CPU time is counted per scenario, by name (set as they start). */
const tracked = {};
const CLK_TCK = 100; // Linux USER_HZ: /proc/<pid>/stat counts CPU time in 1/100 s

/**
 * CPU seconds (user + system) a process has used so far, with its ended children's when `children` (the
 * PostgreSQL server's: backends that closed); `gone` when it is gone.
 */
function cpuSeconds(pid, children = false, gone = 0) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12]) + (children ? Number(f[13]) + Number(f[14]) : 0)) / CLK_TCK;
  } catch {
    return gone;
  }
}

/** PostgreSQL's processes (the server is shared: its backends for this run are most of its CPU). */
function postgresPids() {
  const pids = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'postgres') pids.push(pid);
    } catch {}
  }
  return pids;
}

/**
 * Where the CPU goes while `fn` runs: CPU seconds of each service, nats-server, PostgreSQL and this
 * process (the load generator or webhook receiver), per unit of work (`units(result)`), to show how
 * far the 2 cores allow a figure to go.
 */
async function withCpu(fn, units) {
  const snap = () => {
    const t = Object.fromEntries(Object.entries(tracked).map(([k, pid]) => [k, cpuSeconds(pid)]));
    // Per backend. One that ends meanwhile (a connection closed, replaced) is added to the server's
    // children's time whole: what it had used before is taken off below. One gone since it was listed is
    // left out, as if it had ended before.
    for (const pid of postgresPids()) {
      // null, not undefined, which would take the default 0.
      const s = cpuSeconds(pid, true, null);
      if (s !== null) t[`postgres:${pid}`] = s;
    }
    const u = process.cpuUsage();
    t.bench = (u.user + u.system) / 1e6;
    return t;
  };
  const before = snap();
  const t0 = performance.now();
  const result = await fn();
  const wall = (performance.now() - t0) / 1000;
  const after = snap();
  const n = units(result);
  const ms_per_unit = {};
  let total = 0;
  const used = {};
  for (const [k, v] of Object.entries(after)) {
    const name = k.split(':')[0];
    used[name] = (used[name] ?? 0) + Math.max(0, v - (before[k] ?? 0));
  }
  for (const [k, v] of Object.entries(before)) if (k.startsWith('postgres:') && !(k in after)) used.postgres = (used.postgres ?? 0) - v;
  for (const [k, v] of Object.entries(used)) {
    total += v;
    if (v > 0.005) ms_per_unit[k] = +((v * 1000) / n).toFixed(3);
  }
  ms_per_unit.total = +((total * 1000) / n).toFixed(3);
  return { result, cpu: { ms_per_unit, cores_busy: +(total / wall).toFixed(2) } };
}

/** Samples the peak resident memory of `pids` until the returned function is called. */
function rssPeak(pids) {
  let peak = 0;
  const sample = () => {
    for (const pid of pids) peak = Math.max(peak, rssMb(pid));
  };
  sample();
  const timer = setInterval(sample, 250);
  return () => (clearInterval(timer), sample(), peak);
}

function positiveInt(name, def) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${raw}`);
  return n;
}

const log = (msg) => process.stderr.write(`[bench] ${msg}\n`);

/** Cleanups run last-in first-out, each at most once, whatever happened before. */
const cleanups = [];
let cleaning;
function cleanup() {
  cleaning ??= (async () => {
    while (cleanups.length) {
      const { what, fn } = cleanups.pop();
      try {
        await fn();
      } catch (err) {
        log(`cleanup (${what}) failed: ${err?.message ?? err}`);
        process.exitCode = 1;
      }
    }
  })();
  return cleaning;
}
// A first Ctrl-C stops the running load and lets the step under way finish (a service being started is
// only known, and so stoppable, once it is ready), then the finally below cleans up; a second one cleans
// up at once.
let aborted;
let running; // the autocannon instance under way
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    if (aborted) {
      log(`${sig} again: cleaning up now`);
      void cleanup().finally(() => process.exit(130));
      return;
    }
    aborted = sig;
    log(`${sig}: stopping after the current step`);
    running?.stop();
  });
}

/** Awaits one step, then gives up if a signal came meanwhile. */
async function step(promise) {
  const value = await promise;
  if (aborted) throw new Error(`interrupted by ${aborted}`);
  return value;
}

async function adminQuery(sql) {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    return await c.query(sql);
  } finally {
    await c.end();
  }
}

async function createDatabase() {
  const name = `sb_bench_${Date.now()}_${process.pid}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  cleanups.push({ what: `drop database ${name}`, fn: () => adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) });
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return { name, url: url.toString() };
}

/**
 * bench/floor.mjs as a child in `role` (FLOOR_ROLE; none for the HTTP floor), once its stdout matched
 * `ready`. `line(re)` resolves with the match of a later line; `failed` rejects if the child exits
 * before `stop()`.
 */
async function spawnFloor(role, env, ready) {
  const what = `floor${role ? ` ${role}` : ''}`;
  const profile = PROFILE_DIR && role ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`, `--cpu-prof-name=floor-${role}-${Date.now()}.cpuprofile`] : [];
  const child = spawn(process.execPath, [...profile, join(ROOT, 'bench/floor.mjs')], {
    cwd: ROOT,
    env: { ...process.env, ...env, ...(role ? { FLOOR_ROLE: role } : {}) },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const out = [];
  child.stderr.setEncoding('utf8').on('data', (c) => out.push(c));
  // A floor gone before the bench writes to it must not end the bench (EPIPE) without its cleanup.
  child.stdin.on('error', () => undefined);
  let stopping = false;
  const stop = () => ((stopping = true), stopChild(child));
  cleanups.push({ what, fn: stop });
  let buf = '';
  const waiting = [];
  const check = () => {
    for (const w of [...waiting]) {
      const m = w.re.exec(buf);
      if (m) waiting.splice(waiting.indexOf(w), 1), w.resolve(m);
    }
  };
  const line = (re) =>
    new Promise((resolve) => {
      waiting.push({ re, resolve });
      check();
    });
  child.stdout.setEncoding('utf8').on('data', (chunk) => ((buf += chunk), check()));
  const failed = new Promise((_, reject) => child.once('exit', (code) => stopping || reject(new Error(`${what} exited with ${code}: ${out.join('')}`))));
  failed.catch(() => undefined);
  let timer;
  const match = await Promise.race([
    failed,
    line(ready),
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} not ready after 30 s: ${out.join('')}`)), 30_000))),
  ]).finally(() => clearTimeout(timer));
  return { child, match, line, failed, stop };
}

/** The HTTP floor; resolves with its URL once it serves. */
async function startFloor(env) {
  const floor = await spawnFloor(undefined, { ...env, FLOOR_PORT: '0' }, /FLOOR_READY (\d+) (\d+)/);
  const url = `http://127.0.0.1:${floor.match[1]}`;
  await waitReady(`${url}/readyz`, 10_000, floor.child);
  return { url, child: floor.child, responderPid: Number(floor.match[2]), stop: floor.stop };
}

/** `fn` with the floor up, its two processes' CPU counted as the floor's. */
async function withFloor(env, fn) {
  log('starting floor');
  const floor = await step(startFloor(env));
  tracked.floor = floor.child.pid;
  tracked['floor:responder'] = floor.responderPid;
  try {
    return await fn(floor);
  } finally {
    await floor.stop();
    delete tracked.floor;
    delete tracked['floor:responder'];
  }
}

async function request(url, { method = 'GET', key, body } = {}) {
  const res = await fetch(url, {
    method,
    headers: { ...(key ? { 'X-Api-Key': key } : {}), ...(body ? { 'content-type': 'application/json' } : {}) },
    body,
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${url} answered ${res.status}: ${text}`);
  return JSON.parse(text);
}

function cannon(opts, duration) {
  return new Promise((resolve, reject) => {
    running = autocannon({ connections: CONNECTIONS, duration, ...opts }, (err, result) => {
      running = undefined;
      if (err) reject(err);
      else resolve(result);
    });
  });
}

async function scenario(name, opts) {
  await prepare(name, opts);
  log(`${name}: ${DURATION} s, ${CONNECTIONS} connections`);
  return figures(name, [await measure(opts, DURATION)]);
}

/**
 * The gateway and its floor, ABBA: the gateway's half before and half after the floor's whole run, so a
 * machine that gets faster or slower during the pair (a shared VM does) moves both figures alike.
 */
async function pair(gateway, floor) {
  await prepare(gateway.name, gateway.opts);
  await prepare(floor.name, floor.opts);
  const half = DURATION / 2;
  log(`${gateway.name}: ${half} s, then ${floor.name}: ${DURATION} s, then ${gateway.name}: ${half} s`);
  const first = await measure(gateway.opts, half);
  const f = await measure(floor.opts, DURATION);
  const second = await measure(gateway.opts, half);
  const g = figures(gateway.name, [first, second]);
  g.ratio = g.requests_per_sec / figures(floor.name, [f]).requests_per_sec;
  return [g, figures(floor.name, [f])];
}

async function prepare(name, opts) {
  // Each request is checked once up front so a misconfigured scenario fails fast and clearly.
  await step(request(opts.url, { method: opts.method, key: opts.headers?.['x-api-key'], body: opts.body }));
  if (WARMUP > 0) {
    log(`${name}: warm-up ${WARMUP} s`);
    await step(cannon(opts, WARMUP));
  }
}

function measure(opts, duration) {
  return withCpu(
    () => step(cannon(opts, duration)),
    (res) => Math.max(1, res['2xx']),
  );
}

/** One row from one or more runs of a scenario: rates over all of them, p50 their mean, p99 the worst. */
function figures(name, runs) {
  const sum = (f) => runs.reduce((a, run) => a + f(run), 0);
  const ok = sum(({ result: r }) => r['2xx']);
  const failures = sum(({ result: r }) => r.non2xx + r.errors + r.timeouts);
  const total = ok + failures;
  const ms_per_unit = {};
  for (const { result: r, cpu } of runs) {
    for (const [k, v] of Object.entries(cpu.ms_per_unit)) ms_per_unit[k] = (ms_per_unit[k] ?? 0) + (v * Math.max(1, r['2xx'])) / Math.max(1, ok);
  }
  for (const k of Object.keys(ms_per_unit)) ms_per_unit[k] = +ms_per_unit[k].toFixed(3);
  const seconds = sum(({ result: r }) => r.duration);
  return {
    scenario: name,
    requests_per_sec: sum(({ result: r }) => r.requests.total) / seconds,
    latency_p50_ms: +(sum(({ result: r }) => r.latency.p50 * r.duration) / seconds).toFixed(1),
    latency_p99_ms: Math.max(...runs.map(({ result: r }) => r.latency.p99)),
    non_2xx: sum(({ result: r }) => r.non2xx),
    errors: sum(({ result: r }) => r.errors),
    timeouts: sum(({ result: r }) => r.timeouts),
    ok_2xx: ok,
    total,
    failure_ratio: total ? failures / total : 1,
    cpu: { ms_per_unit, cores_busy: +(sum(({ cpu, result: r }) => cpu.cores_busy * r.duration) / seconds).toFixed(2) },
  };
}

/**
 * `size` trial subscriptions of a new weekly plan whose trial ends at `end`, written straight into
 * billing's tables (making them through checkout would take longer than the sweep itself), due at
 * `end` less the weekly renewal lead time (a day) as billing would have stored it.
 */
async function insertDue(c, api, wallet, name, size, now, end) {
  const plan = await request(`${api}/plans`, {
    method: 'POST',
    key: wallet.admin_key,
    body: JSON.stringify({ name, amount_sats: 1000, interval: 'weekly', trial_days: 7 }),
  });
  const tag = randomBytes(4).toString('hex');
  await c.query(
    `INSERT INTO billing.subscribers (id, wallet_id, token_hash, token_sealed, created_at)
     SELECT 'cus_b${tag}_' || g, $1, md5('${tag}' || g), 'bench', $2 FROM generate_series(1, $3) g`,
    [wallet.id, now, size],
  );
  await c.query(
    `INSERT INTO billing.subscriptions (id, wallet_id, plan_id, subscriber_id, status, payment_method, amount_sats, interval,
       grace_period_days, period_anchor, period_index, current_period_start, current_period_end, trial_end,
       receive_confirmations, receive_reminders, created_at, updated_at, next_due_at)
     SELECT 'sub_b${tag}_' || g, $1, $2, 'cus_b${tag}_' || g, 'active', 'lightning', 1000, 'weekly', 0, $4, 0, $3, $4, $4,
       true, true, $3, $3, $6 FROM generate_series(1, $5) g`,
    [wallet.id, plan.id, now, end, size, end - 86_400],
  );
  // Tables as autovacuum would soon leave them: rows loaded in one statement would otherwise be planned
  // as the few there were before, and autovacuum would land inside the measurement, cleaning up after
  // the last sweep (a floor's sweep right after the scheduler's paid for the scheduler's dead rows).
  await c.query('VACUUM (ANALYZE) billing.subscribers, billing.subscriptions, billing.renewal_payments, billing.outbox, payments.payments');
  return plan;
}

/**
 * Runs `start` and resolves once the `n` subscriptions of `planId` have their renewal payment; fails when
 * that stops moving. The bench's own queries take PostgreSQL's time from the sweep (a count over the
 * plan's rows every 250 ms took 7 % of the machine at 100k), so while it is under way only the outbox's
 * last sequence number is read (an index's last entry); the rows are counted once it holds the two
 * events each of these renewals writes (a reminder, `subscription.trial_ending`), or has not moved for
 * a second.
 */
async function renewedAll(c, planId, n, what, start) {
  const lastSeq = async () => (await c.query('SELECT coalesce(max(seq), 0)::float8 AS s FROM billing.outbox')).rows[0].s;
  const base = await lastSeq();
  await start();
  let seen = base;
  let moved = performance.now();
  let counted = 0;
  for (;;) {
    const seq = await lastSeq();
    const now = performance.now();
    if (seq !== seen) [seen, moved] = [seq, now];
    // Once the events are there, counted on every read (a lane's last commit may lag the highest
    // sequence number by moments); when they stop short, once a second.
    if (seq - base >= 2 * n || (now - moved >= 1000 && now - counted >= 1000)) {
      counted = now;
      const { rows } = await c.query('SELECT count(*)::int AS n FROM billing.subscriptions WHERE plan_id = $1 AND renewal_for = current_period_end', [planId]);
      if (rows[0].n >= n) return;
    }
    if (now - moved > 120_000) throw new Error(`${what} stalled for 2 minutes`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Until billing's outbox is relayed (a relay far behind the sweep is a problem too), at most 120 s more. */
async function outboxDrained(c, what, t0, seconds) {
  for (;;) {
    const { rows } = await c.query('SELECT count(*)::int AS n FROM billing.outbox WHERE published_at IS NULL');
    if (rows[0].n === 0 || performance.now() - t0 > (seconds + 120) * 1000) {
      log(`${what}: outbox ${rows[0].n ? `still ${rows[0].n} unpublished` : 'drained'} ${((performance.now() - t0) / 1000 - seconds).toFixed(1)} s after`);
      return;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * The renewal sweep of `size` due subscriptions: the test clock moves past the renewal lead time and the
 * time until the scheduler has created all the renewal payments is measured. Then, on a quiet machine,
 * the same for `size` more through the sweep's floor (bench/floor.mjs, sweepFloor): the least the same
 * renewals cost with this design, in the same passes, batches and transactions.
 */
async function renewalSweep(databaseUrl, api, wallet, size, pids) {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    await settle(api, wallet, c);
    const clock = await request(`${api}/dev/clock`, { method: 'POST', key: wallet.admin_key, body: '{}' });
    log(`sweep N=${size}: inserting`);
    const plan = await insertDue(c, api, wallet, `Sweep ${size}`, size, clock.now, clock.now + 2 * 86_400);
    const peak = rssPeak(pids);
    const t0 = performance.now();
    const { cpu } = await withCpu(
      () => sweepUntilDone(c, api, wallet, plan, size),
      () => size,
    );
    const seconds = (performance.now() - t0) / 1000;
    log(`sweep N=${size}: ${seconds.toFixed(1)} s`);
    await outboxDrained(c, `sweep N=${size}`, t0, seconds);
    const ours = { n: size, seconds, per_second: size / seconds, rss_peak_mb: peak(), cpu };
    if (!SWEEP_FLOOR) return ours;

    // The floor's rows fall due an hour from now by the test clock (real time plus the moves asked for),
    // out of the reach of billing's scheduler for the floor's run: the floor sweeps at that moment, alone.
    await quiet(c);
    const { now } = await request(`${api}/dev/clock`, { method: 'POST', key: wallet.admin_key, body: '{}' });
    log(`floor sweep N=${size}: inserting`);
    const floorPlan = await insertDue(c, api, wallet, `Floor sweep ${size}`, size, now, now + 3600 + 86_400);
    const floor = await step(spawnFloor('sweep', { DATABASE_URL: databaseUrl, FLOOR_PLAN: floorPlan.id, FLOOR_NOW: String(now + 3600) }, /FLOOR_SWEEP_READY/));
    tracked.floor = floor.child.pid;
    try {
      // Done when the renewals exist, as for the scheduler; a floor done with fewer fails at once.
      const short = floor
        .line(/FLOOR_SWEEP_DONE (\d+)/)
        .then((m) => (Number(m[1]) < size ? Promise.reject(new Error(`floor sweep N=${size} renewed ${m[1]}`)) : new Promise(() => undefined)));
      const f0 = performance.now();
      const { cpu: floorCpu } = await withCpu(
        () => Promise.race([renewedAll(c, floorPlan.id, size, `floor sweep N=${size}`, () => floor.child.stdin.write('go\n')), floor.failed, short]),
        () => size,
      );
      const floorSeconds = (performance.now() - f0) / 1000;
      log(`floor sweep N=${size}: ${floorSeconds.toFixed(1)} s`);
      await outboxDrained(c, `floor sweep N=${size}`, f0, floorSeconds);
      return { ...ours, floor: { n: size, seconds: floorSeconds, per_second: size / floorSeconds, cpu: floorCpu } };
    } finally {
      await floor.stop();
      delete tracked.floor;
    }
  } finally {
    await c.end();
  }
}

/**
 * What earlier scenarios left behind (open checkouts, trials, an earlier sweep's renewals) falls due when
 * a sweep moves the clock: it is moved 30 days first, past every trial, period and dunning of them (all
 * end cancelled or expired, nothing was paid), and the machine left to go quiet, so that a sweep
 * measures its own renewals only.
 */
async function settle(api, wallet, c) {
  // As in sweepUntilDone: the gateway may stop waiting for the sweep this call runs (503) while it goes on.
  await fetch(`${api}/dev/clock`, {
    method: 'POST',
    headers: { 'x-api-key': wallet.admin_key, 'content-type': 'application/json' },
    body: JSON.stringify({ advance_seconds: 30 * 86_400 }),
  });
  const seconds = await quiet(c);
  log(`clock moved 30 days ahead; quiet after ${seconds.toFixed(1)} s`);
}

/**
 * Waits until the machine is quiet: 2 s in a row with the services and PostgreSQL all but idle and no
 * autovacuum under way (the last sweep's rows would have it vacuum inside the next measurement); at most
 * 5 min. Returns after how long.
 */
async function quiet(c) {
  const vacuuming = async () => (await c.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`)).rows[0].n > 0;
  const busy = () => Object.values(tracked).reduce((a, pid) => a + cpuSeconds(pid), 0) + postgresPids().reduce((a, pid) => a + cpuSeconds(pid), 0);
  const started = performance.now();
  const until = started + 300_000;
  let calm = 0;
  // Idle, the services' pollers and PostgreSQL take 0.05-0.09 of a core between them; a profiler's
  // sampling keeps each profiled service a little busier.
  const idle = PROFILE_DIR ? 0.15 + 0.03 * Object.keys(tracked).length : 0.15;
  let last = busy();
  while (calm < 2 && performance.now() < until) {
    await new Promise((r) => setTimeout(r, 1000));
    const now = busy();
    calm = now - last < idle && !(await vacuuming()) ? calm + 1 : 0;
    last = now;
  }
  return (performance.now() - started) / 1000;
}

/** Moves the clock past the renewal lead time and waits until all `size` renewal payments exist. */
async function sweepUntilDone(c, api, wallet, plan, size) {
  // The clock call also runs a sweep; the gateway may give up waiting (503) while the sweep goes on. A
  // sweep that stops moving is a failure, not a long wait (rows the scheduler never loads, say).
  await renewedAll(c, plan.id, size, `sweep N=${size}`, () =>
    fetch(`${api}/dev/clock`, {
      method: 'POST',
      headers: { 'x-api-key': wallet.admin_key, 'content-type': 'application/json' },
      body: JSON.stringify({ advance_seconds: 1.5 * 86_400 }),
    }),
  );
}

/**
 * Outgoing webhooks: `size` events written to billing's outbox at once (copies, each with its own id, of
 * a real `subscription.created` of the bench wallet) are relayed to JetStream and delivered by the
 * notifier to a local receiver that verifies every signature (Standard Webhooks). The rate is from the first
 * of these deliveries to the last; every event must arrive, signed.
 */
async function webhookDeliveries(databaseUrl, api, wallet, planId, size) {
  const seen = new Set();
  let forged = 0;
  let first = 0;
  let last = 0;
  let verifier;
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      try {
        verifier.verify(Buffer.concat(chunks).toString('utf8'), req.headers);
        // The event id travels as the message id (webhook-id), which the signature covers.
        const id = String(req.headers['webhook-id']);
        if (id.startsWith('evt_bench')) {
          first ||= performance.now();
          seen.add(id);
        }
        last = performance.now();
      } catch {
        forged++;
      }
      res.writeHead(200).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push({ what: 'webhook receiver', fn: () => new Promise((resolve) => server.close(resolve)) });
  const endpoint = await request(`${api}/webhook-endpoints`, {
    method: 'POST',
    key: wallet.admin_key,
    body: JSON.stringify({ url: `http://127.0.0.1:${server.address().port}/hook`, events: ['subscription.created'] }),
  });
  verifier = new Webhook(endpoint.secret);
  // One real checkout gives the event the copies are made of.
  await request(`${api}/public/subscribe`, {
    method: 'POST',
    body: JSON.stringify({ plan_id: planId, payment_method: 'lightning', email: `hook-${Date.now()}@bench.test` }),
  });
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    const { rows } = await c.query(`SELECT payload FROM billing.outbox WHERE subject = 'events.subscription.created' ORDER BY seq DESC LIMIT 1`);
    if (!rows[0]) throw new Error('webhooks: no subscription.created event to copy');
    log(`webhooks: ${size} events`);
    const t0 = performance.now();
    const { cpu } = await withCpu(
      () => writeAndAwait(c, rows[0].payload, size, seen),
      () => size,
    );
    // From the first of these deliveries to the last: what went before is the notifier working off the
    // checkout scenarios' events.
    log(`webhooks: first delivery ${((first - t0) / 1000).toFixed(1)} s after the write`);
    const seconds = (last - first) / 1000;
    log(`webhooks: ${size} delivered in ${seconds.toFixed(1)} s, ${forged} unverifiable`);
    return { n: size, seconds, per_second: size / seconds, unverifiable: forged, cpu };
  } finally {
    await c.end();
  }
}

/** Writes `size` copies of an event into billing's outbox and waits until the receiver has seen them all. */
async function writeAndAwait(c, payload, size, seen) {
  await c.query(
    `INSERT INTO billing.outbox (event_id, subject, payload)
       SELECT 'evt_bench' || g, 'events.subscription.created', jsonb_set($1::jsonb, '{id}', to_jsonb('evt_bench' || g)) FROM generate_series(1, $2) g`,
    [payload, size],
  );
  let lastCount = -1;
  let lastMoved = performance.now();
  while (seen.size < size) {
    if (seen.size !== lastCount) [lastCount, lastMoved] = [seen.size, performance.now()];
    // The notifier may first work off the events of the checkout scenarios.
    if (performance.now() - lastMoved > 300_000) throw new Error(`webhooks: stalled at ${seen.size} of ${size} deliveries`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function machine() {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    memory_gb: +(os.totalmem() / 2 ** 30).toFixed(1),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
  };
}

function printTable(rows, m) {
  const cols = [
    ['scenario', (r) => r.scenario],
    ['req/s', (r) => r.requests_per_sec.toFixed(1)],
    ['p50 ms', (r) => String(r.latency_p50_ms)],
    ['p99 ms', (r) => String(r.latency_p99_ms)],
    ['non-2xx', (r) => String(r.non_2xx + r.errors + r.timeouts)],
    ['gateway/floor', (r) => (r.ratio === undefined ? '' : r.ratio.toFixed(3))],
  ];
  const cells = [cols.map(([h]) => h), ...rows.map((r) => cols.map(([, f]) => f(r)))];
  const widths = cols.map((_, i) => Math.max(...cells.map((row) => row[i].length)));
  const line = (row) => row.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  console.log(`\nmachine: ${m.cpu}, ${m.cores} cores, ${m.memory_gb} GiB, node ${m.node}`);
  console.log(`settings: ${DURATION} s per scenario, ${CONNECTIONS} connections, warm-up ${WARMUP} s`);
  console.log(line(cells[0]));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of cells.slice(1)) console.log(line(row));
}

async function main() {
  const tmp = mkdtempSync(join(os.tmpdir(), 'sb-bench-'));
  cleanups.push({ what: 'temp dir', fn: () => rmSync(tmp, { recursive: true, force: true }) });

  const db = await step(createDatabase());
  log(`database ${db.name}`);
  const nats = await startNats(join(tmp, 'nats'));
  cleanups.push({ what: 'nats-server', fn: nats.stop });
  tracked.nats = nats.child.pid;
  await step();
  const env = { ...SERVICE_ENV, DATABASE_URL: db.url, NATS_URL: nats.url };

  log('starting the services');
  // Billing first: it applies the billing schema the floor also uses.
  const services = {};
  for (const name of ['billing', 'payments', 'nwc', 'notifier', 'gateway']) {
    services[name] = await step(
      startService(name, env, { nodeArgs: PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`, `--cpu-prof-name=${name}.cpuprofile`] : [] }),
    );
    cleanups.push({ what: name, fn: services[name].stop });
    tracked[name] = services[name].child.pid;
  }
  const { billing, payments, gateway } = services;
  // Idle memory: every service started and ready, nothing asked of it yet but its own timers.
  let rssIdle;
  if (ONLY.has('rss')) {
    await new Promise((r) => setTimeout(r, 5000));
    rssIdle = Object.fromEntries(Object.entries(services).map(([name, s]) => [name, rssMb(s.child.pid)]));
    log(`idle RSS (MB): ${JSON.stringify(rssIdle)}`);
  }
  const wallet = await step(createWallet(db.url, 'Bench wallet'));
  const api = `${gateway.url}${API_PREFIX}`;
  const plan = await step(request(`${api}/plans`, { method: 'POST', key: wallet.admin_key, body: PLAN_BODY }));
  log(`wallet ${wallet.id}, plan ${plan.id}`);

  const post = { method: 'POST', body: PLAN_BODY };
  const json = { 'content-type': 'application/json' };
  const rows = [];
  const byName = {};
  const floorEnv = { DATABASE_URL: db.url, NATS_URL: nats.url, FLOOR_WALLET: wallet.id };
  if (ONLY.has('gateway')) {
    await withFloor(floorEnv, async (floor) => {
      [byName.gateway_get, byName.floor_get] = await pair(
        { name: 'gateway GET /plans/{id}', opts: { url: `${api}/plans/${plan.id}`, headers: { 'x-api-key': wallet.invoice_key } } },
        { name: 'floor GET /plans/{id}', opts: { url: `${floor.url}/plans/${plan.id}` } },
      );
      [byName.gateway_post, byName.floor_post] = await pair(
        { name: 'gateway POST /plans', opts: { url: `${api}/plans`, ...post, headers: { 'x-api-key': wallet.admin_key, ...json } } },
        { name: 'floor POST /plans', opts: { url: `${floor.url}/plans`, ...post, headers: json } },
      );
    });
    rows.push(byName.gateway_get, byName.gateway_post, byName.floor_get, byName.floor_post);
  }

  // Public checkout: every request a new contact (a repeated one would be a 409).
  let n = 0;
  const subscribeOpts = (planId, url = `${api}/public/subscribe`, first = 'first') => ({
    url,
    method: 'POST',
    headers: json,
    body: JSON.stringify({ plan_id: planId, payment_method: 'lightning', email: `${first}-${planId}@bench.test` }),
    requests: [
      { setupRequest: (req) => ({ ...req, body: JSON.stringify({ plan_id: planId, payment_method: 'lightning', email: `c${n++}-${planId}@bench.test` }) }) },
    ],
  });
  const paidPlan = await step(
    request(`${api}/plans`, { method: 'POST', key: wallet.admin_key, body: JSON.stringify({ name: 'Bench paid', amount_sats: 1000, interval: 'monthly' }) }),
  );
  if (ONLY.has('subscribe')) {
    const trialPlan = await step(
      request(`${api}/plans`, {
        method: 'POST',
        key: wallet.admin_key,
        body: JSON.stringify({ name: 'Bench trial', amount_sats: 1000, interval: 'monthly', trial_days: 7 }),
      }),
    );
    rows.push(await scenario('gateway POST /public/subscribe (trial)', subscribeOpts(trialPlan.id)));
    // Beside the least a Lightning checkout can cost here (bench/floor.mjs, lightningCheckout): how close to it.
    await withFloor(floorEnv, async (floor) => {
      [byName.subscribe_lightning, byName.floor_subscribe_lightning] = await pair(
        { name: 'gateway POST /public/subscribe (Lightning)', opts: subscribeOpts(paidPlan.id) },
        { name: 'floor POST /public/subscribe (Lightning)', opts: subscribeOpts(paidPlan.id, `${floor.url}/public/subscribe`, 'floor') },
      );
    });
    rows.push(byName.subscribe_lightning, byName.floor_subscribe_lightning);
  }

  // Before the sweeps: their events (a reminder per renewal) would queue ahead of these in the notifier.
  const webhooks = ONLY.has('webhooks') ? await step(webhookDeliveries(db.url, api, wallet, paidPlan.id, WEBHOOK_EVENTS)) : undefined;
  const sweeps = [];
  if (ONLY.has('sweep'))
    for (const size of SWEEP_SIZES) sweeps.push(await step(renewalSweep(db.url, api, wallet, size, [billing.child.pid, payments.child.pid])));

  const m = machine();
  printTable(rows, m);
  if (sweeps.length) {
    console.log('\nrenewal sweep (scheduler creates one renewal payment per due subscription)');
    for (const w of sweeps) {
      console.log(
        `  N=${String(w.n).padStart(7)}  ${w.seconds.toFixed(1).padStart(7)} s  ${w.per_second.toFixed(0).padStart(6)} renewals/s  peak RSS ${w.rss_peak_mb} MB (billing, payments)`,
      );
      if (w.floor)
        console.log(
          `  floor    ${w.floor.seconds.toFixed(1).padStart(7)} s  ${w.floor.per_second.toFixed(0).padStart(6)} renewals/s  (the scheduler at ${(w.per_second / w.floor.per_second).toFixed(3)} of the floor)`,
        );
    }
  }
  if (webhooks?.unverifiable) process.exitCode = 1;
  if (webhooks) console.log(`\nwebhook deliveries: ${webhooks.n} signed deliveries in ${webhooks.seconds.toFixed(1)} s = ${webhooks.per_second.toFixed(0)}/s`);
  const cpuRows = [
    ...rows.map((r) => [r.scenario, r.cpu, 'request']),
    ...(webhooks ? [['webhook deliveries', webhooks.cpu, 'delivery']] : []),
    ...sweeps.flatMap((w) => [[`renewal sweep N=${w.n}`, w.cpu, 'renewal'], ...(w.floor ? [[`floor renewal sweep N=${w.n}`, w.floor.cpu, 'renewal']] : [])]),
  ];
  if (cpuRows.length) {
    // The ceiling: the rate at which the machine's cores would be busy with nothing but this work.
    console.log(`\nCPU per unit of work (ms, all processes on the machine); ceiling = ${m.cores} cores / total`);
    for (const [name, cpu, unit] of cpuRows) {
      const { total, ...parts } = cpu.ms_per_unit;
      const detail = Object.entries(parts)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => `${k} ${v.toFixed(2)}`)
        .join(', ');
      console.log(`  ${name}: ${total.toFixed(2)} ms/${unit} (${detail}); ${cpu.cores_busy} cores busy; ceiling ${Math.round((m.cores * 1000) / total)}/s`);
    }
  }
  if (rssIdle)
    console.log(
      `\nidle RSS (MB): ${Object.entries(rssIdle)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
    );
  const started = new Date();
  const dir = join(ROOT, 'bench/results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${started.toISOString().replace(/:/g, '-')}.json`);
  writeFileSync(
    file,
    `${JSON.stringify({ at: started.toISOString(), machine: m, settings: { duration_s: DURATION, connections: CONNECTIONS, warmup_s: WARMUP }, results: rows, renewal_sweeps: sweeps }, null, 2)}\n`,
  );
  // The figures of the performance goals, under fixed keys, for scripts that compare runs.
  const figure = (r) =>
    r && { rps: +r.requests_per_sec.toFixed(1), p50_ms: r.latency_p50_ms, p99_ms: r.latency_p99_ms, errors: r.non_2xx + r.errors + r.timeouts };
  const latest = {
    at: started.toISOString(),
    machine: m,
    gateway_get: figure(byName.gateway_get),
    floor_get: figure(byName.floor_get),
    gateway_post: figure(byName.gateway_post),
    floor_post: figure(byName.floor_post),
    subscribe_lightning: figure(byName.subscribe_lightning),
    floor_subscribe_lightning: figure(byName.floor_subscribe_lightning),
    ratio_get: byName.gateway_get && +byName.gateway_get.ratio.toFixed(3),
    ratio_post: byName.gateway_post && +byName.gateway_post.ratio.toFixed(3),
    ratio_subscribe_lightning: byName.subscribe_lightning && +byName.subscribe_lightning.ratio.toFixed(3),
    sweep: sweeps.map((w) => ({ n: w.n, seconds: +w.seconds.toFixed(1), rate: Math.round(w.per_second), rss_peak_mb: w.rss_peak_mb })),
    floor_sweep: sweeps.flatMap((w) => (w.floor ? [{ n: w.n, seconds: +w.floor.seconds.toFixed(1), rate: Math.round(w.floor.per_second) }] : [])),
    ratio_sweep: sweeps.flatMap((w) => (w.floor ? [{ n: w.n, ratio: +(w.per_second / w.floor.per_second).toFixed(3) }] : [])),
    webhook_deliveries_per_s: webhooks && Math.round(webhooks.per_second),
    rss_idle_mb: rssIdle,
    cpu_ms_per_unit: Object.fromEntries(cpuRows.map(([name, cpu]) => [name, cpu.ms_per_unit])),
  };
  writeFileSync(join(dir, 'latest.json'), `${JSON.stringify(latest, null, 2)}\n`);
  console.log(`\nwritten ${file} and ${join(dir, 'latest.json')}`);

  const bad = rows.filter((r) => r.failure_ratio > MAX_FAILURE_RATIO || r.ok_2xx === 0);
  if (bad.length) {
    for (const r of bad) log(`FAIL ${r.scenario}: ${(r.failure_ratio * 100).toFixed(2)}% non-2xx/errors (limit ${MAX_FAILURE_RATIO * 100}%)`);
    for (const svc of [billing, gateway]) if (svc.lines.length) log(`${svc.name} last lines:\n${svc.lines.slice(-10).join('\n')}`);
    process.exitCode = 1;
  }
}

try {
  await main();
} catch (err) {
  log(`failed: ${err?.stack ?? err}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
process.exit(process.exitCode ?? 0);
