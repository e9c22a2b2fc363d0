// One `npm start` per data directory: two stacks on one .data would run two nats-servers on one
// JetStream store and two PGlite servers on one database directory.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
};

/** The command line of a process, or '' when it is gone (Linux /proc; elsewhere always ''). */
const commandOf = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
};

/**
 * Takes `<data>/start.lock` for this process. Another live `npm start` holding it: prints who and returns
 * undefined. A lock left by one that was killed outright is taken over, and the nats-server it recorded
 * (if still running on this data directory) is stopped first, so it does not hold the store and port.
 */
export function acquireLock(data, { log = (line) => console.error(line) } = {}) {
  const file = join(data, 'start.lock');
  let held;
  try {
    held = JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    held = undefined;
  }
  if (held?.pid && held.pid !== process.pid && alive(held.pid)) {
    log(`Another npm start (pid ${held.pid}) is running on ${data}: stop it first (Ctrl-C in its terminal, or kill ${held.pid}).`);
    return undefined;
  }
  for (const [name, pid] of Object.entries(held?.children ?? {})) {
    if (alive(pid) && commandOf(pid).includes(data)) {
      log(`stopping ${name} (pid ${pid}) left running by an earlier npm start that was killed`);
      process.kill(pid, 'SIGTERM');
      const until = Date.now() + 5000;
      while (alive(pid) && Date.now() < until) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
  const state = { pid: process.pid, children: {} };
  const save = () => writeFileSync(file, JSON.stringify(state), { mode: 0o600 });
  save();
  return {
    /** Records a child that does not stop by itself when this process dies (nats-server). */
    track(name, pid) {
      state.children[name] = pid;
      save();
    },
    release() {
      rmSync(file, { force: true });
    },
  };
}
