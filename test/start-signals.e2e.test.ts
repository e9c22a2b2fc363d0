import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from './support/http.js';
import { spawnStart, type StartedStack, untilReady } from './support/start.js';
import { alive, createDatabase } from './support/stack.js';

/**
 * `npm start` stops its whole stack however it is stopped (SIGHUP of a closed terminal, SIGTERM, or
 * killed outright), and a second start on the same data directory is refused while the first runs.
 */
let db: Awaited<ReturnType<typeof createDatabase>>;
let data: string;
const running: ChildProcess[] = [];

beforeAll(async () => {
  db = await createDatabase('sb_signals');
  data = mkdtempSync(join(tmpdir(), 'sb-start-'));
});
afterAll(async () => {
  for (const c of running) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await db?.drop().catch(() => undefined);
  if (data) rmSync(data, { recursive: true, force: true });
});

/** Starts `node scripts/start.mjs` on the shared data directory and its own nats-server. */
async function startStack() {
  const s = await spawnStart({ DATABASE_URL: db.url, DB_ROLES: '0', NATS_URL: '', SB_DATA_DIR: data });
  running.push(s.child);
  return s;
}
const ready = (s: StartedStack) => untilReady(s, 120_000);

/** Every process of the stack: the services from the supervisor's lines, nats-server from the lock. */
function pidsOf(lines: string[]): number[] {
  return [...lines.join('\n').matchAll(/\[supervisor\] \S+ running as pid (\d+)/g)].map((m) => Number(m[1]));
}

const allGone = (pids: number[]) =>
  until(
    async () => pids.filter(alive),
    (left) => left.length === 0,
    30_000,
  );

describe('npm start operations', () => {
  it('refuses a second start on the same data; SIGHUP stops every process, nats-server included', async () => {
    const first = await startStack();
    await ready(first);
    const pids = pidsOf(first.lines);
    expect(pids.length).toBe(6); // nats-server and the five services
    expect(existsSync(join(data, 'start.lock'))).toBe(true);

    const second = await startStack();
    expect(await second.exited).toBe(1);
    expect(second.lines.join('\n')).toContain(`Another npm start (pid ${first.child.pid}) is running on ${data}`);
    expect(pids.every(alive)).toBe(true);

    first.child.kill('SIGHUP');
    expect(await first.exited).toBe(0);
    expect(await allGone(pids)).toEqual([]);
    expect(existsSync(join(data, 'start.lock'))).toBe(false);
  });

  it('killed outright, its services stop by themselves, and the next start stops the nats-server it left', async () => {
    const first = await startStack();
    await ready(first);
    const pids = pidsOf(first.lines);
    const nats = Number(/nats-server running as pid (\d+)/.exec(first.lines.join('\n'))?.[1]);
    expect(alive(nats)).toBe(true);
    first.child.kill('SIGKILL');
    await first.exited;
    // The services watch the process that started them.
    expect(await allGone(pids.filter((p) => p !== nats))).toEqual([]);

    const next = await startStack();
    await ready(next);
    expect(next.lines.join('\n')).toContain(`stopping nats-server (pid ${nats}) left running by an earlier npm start that was killed`);
    expect(alive(nats)).toBe(false);
    const nextPids = pidsOf(next.lines);
    next.child.kill('SIGTERM');
    expect(await next.exited).toBe(0);
    expect(await allGone(nextPids)).toEqual([]);
  });
});
