import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { expect } from 'vitest';
import { freePort, ROOT } from '../../scripts/stack.mjs';
import { until } from './http.js';

export interface StartedStack {
  child: ChildProcess;
  /** Its output (stdout and stderr), line by line as it comes. */
  lines: string[];
  ports: { PORT: number; BILLING_OPS_PORT: number; PAYMENTS_OPS_PORT: number; NWC_OPS_PORT: number; NOTIFIER_OPS_PORT: number };
  exited: Promise<number | null>;
}

/**
 * `npm start` (`node scripts/start.mjs`) on free ports, with `env` over this process's environment (a fresh
 * SECRETS_KEY and LOG_LEVEL=warn unless given). `detached`: a process group of its own, so Ctrl-C can be
 * sent the way a terminal does, to every process in it.
 */
export async function spawnStart(env: Record<string, string>, opts: { detached?: boolean } = {}): Promise<StartedStack> {
  const ports = {
    PORT: await freePort(),
    BILLING_OPS_PORT: await freePort(),
    PAYMENTS_OPS_PORT: await freePort(),
    NWC_OPS_PORT: await freePort(),
    NOTIFIER_OPS_PORT: await freePort(),
  };
  const child = spawn(process.execPath, [join(ROOT, 'scripts/start.mjs')], {
    cwd: ROOT,
    env: {
      ...process.env,
      ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
      SECRETS_KEY: randomBytes(32).toString('hex'),
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.detached ?? false,
  });
  const lines: string[] = [];
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8');
    let buf = '';
    stream.on('data', (chunk: string) => {
      buf += chunk;
      const parts = buf.split('\n');
      buf = parts.pop()!;
      lines.push(...parts);
    });
  }
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, lines, ports, exited };
}

/** Waits until the stack says its API is ready (or it exits); fails with its output otherwise. */
export async function untilReady(s: StartedStack, ms = 150_000): Promise<void> {
  const ready = () => s.lines.some((l) => l.includes('API ready at'));
  await until(
    async () => ready() || s.child.exitCode !== null,
    (ok) => ok,
    ms,
  );
  expect(ready(), s.lines.join('\n')).toBe(true);
}
