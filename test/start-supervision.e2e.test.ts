import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { dbRolePrefix, dropDbRoles } from '../scripts/db-roles.mjs';
import { startNats, stopChild } from '../scripts/stack.mjs';
import { until } from './support/http.js';
import { spawnStart } from './support/start.js';
import { ADMIN_DATABASE_URL, alive, createDatabase } from './support/stack.js';

/** `npm start` (scripts/start.mjs) restarts a child that exits, with a backoff, and Ctrl-C still stops everything. */
let db: Awaited<ReturnType<typeof createDatabase>>;
let nats: Awaited<ReturnType<typeof startNats>>;
let natsDir: string;
let start: ChildProcess | undefined;
let lines: string[] = [];

beforeAll(async () => {
  db = await createDatabase('sb_supervise');
  natsDir = mkdtempSync(join(tmpdir(), 'sb-nats-'));
  nats = await startNats(natsDir);
});
afterAll(async () => {
  if (start) await stopChild(start);
  await nats?.stop();
  if (natsDir) rmSync(natsDir, { recursive: true, force: true });
  await db?.drop().catch(() => undefined);
  if (db) await dropDbRoles(ADMIN_DATABASE_URL, { prefix: dbRolePrefix(db.url) }).catch(() => undefined);
});

/** The pid each supervised process runs as now, from the supervisor's lines. */
function pids(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const l of lines) {
    const m = /\[supervisor\] (\S+) running as pid (\d+)/.exec(l);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}
const status = (url: string) =>
  fetch(url, { signal: AbortSignal.timeout(5000) }).then(
    (r) => r.status,
    () => 0,
  );

describe('npm start supervision', () => {
  it('restarts a killed service with a growing backoff and logs it; SIGINT stops every process', async () => {
    const stack = await spawnStart({ DATABASE_URL: db.url, NATS_URL: nats.url, SB_DATA_DIR: natsDir }, { detached: true });
    start = stack.child;
    lines = stack.lines;
    const { ports } = stack;
    await until(
      async () => lines.some((l) => l.includes('API ready at')),
      (ok) => ok,
      120_000,
    );
    expect(lines.some((l) => l.includes('API ready at'))).toBe(true);
    // Each service connects as a role of this database's own (found from outside: sb_<service> were shared
    // by every database of the server, and each start changed the others' passwords).
    const prefix = dbRolePrefix(db.url);
    expect(prefix).toBe(`sb_${db.name}_`);
    expect(lines.some((l) => l.includes(`PostgreSQL roles ${prefix}<service> provisioned`))).toBe(true);
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    const users = (
      await admin.query('SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = current_database() AND usename LIKE $1', [`${prefix}%`])
    ).rows
      .map((r) => r.usename)
      .sort();
    await admin.end();
    expect(users).toEqual(['billing', 'gateway', 'notifier', 'nwc', 'payments'].map((s) => `${prefix}${s}`));
    const first = pids();
    expect(Object.keys(first).sort()).toEqual(['billing', 'gateway', 'notifier', 'nwc', 'payments']);
    const billingReady = `http://127.0.0.1:${ports.BILLING_OPS_PORT}/readyz`;

    // Killed once: restarted after 1 s; killed again soon after: after 2 s.
    for (const [round, delay] of [
      [1, 1000],
      [2, 2000],
    ] as const) {
      const before = pids().billing!;
      process.kill(before, 'SIGKILL');
      const restarted = await until(
        async () => pids().billing,
        (p) => p !== undefined && p !== before,
        30_000,
      );
      expect(restarted).not.toBe(before);
      expect(
        lines.some((l) => l.includes(`[supervisor] billing (pid ${before}) exited with SIGKILL; restarting in ${delay} ms`)),
        `round ${round}`,
      ).toBe(true);
      expect(
        await until(
          () => status(billingReady),
          (s) => s === 200,
          60_000,
        ),
      ).toBe(200);
    }
    // The restarted billing answers through the gateway.
    const api = `http://127.0.0.1:${ports.PORT}/subscriptions_manager/api/v1`;
    expect((await fetch(`${api}/public/plan/plan_nope`)).status).toBe(404);

    // Ctrl-C (SIGINT to the whole group, as a terminal sends it): everything stops, nothing restarts.
    const running = Object.values(pids());
    expect(running.every(alive)).toBe(true);
    const exited = new Promise<number | null>((r) => start!.once('exit', (code) => r(code)));
    process.kill(-start.pid!, 'SIGINT');
    expect(await exited).toBe(0);
    start = undefined;
    expect(
      await until(
        async () => running.filter(alive),
        (l) => l.length === 0,
        10_000,
      ),
    ).toEqual([]);
    expect(lines.filter((l) => /restarting in/.test(l))).toHaveLength(2);
  });
});
