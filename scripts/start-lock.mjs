// One `npm start` per data directory: two stacks on one .data would run two nats-servers on one
// JetStream store and two PGlite servers on one database directory.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Where `npm start` keeps its data (SB_DATA_DIR: another one; tests run stacks side by side this way). */
export const dataDir = () => process.env.SB_DATA_DIR || join(dirname(dirname(fileURLToPath(import.meta.url))), '.data');

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
  const held = readLock(file);
  if (refuseIfHeld(data, held, log)) return undefined;
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

function readLock(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}

/** True (and said) when another live `npm start` holds the lock. */
function refuseIfHeld(data, held, log) {
  if (!(held?.pid && held.pid !== process.pid && alive(held.pid))) return false;
  log(`Another npm start (pid ${held.pid}) is running on ${data}: stop it first (Ctrl-C in its terminal, or kill ${held.pid}).`);
  return true;
}

// `node scripts/start-lock.mjs`: the check `npm start` makes before its build, so a second start is refused
// at once rather than after a build that rewrites web/dist under the running gateway.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const data = dataDir();
  if (refuseIfHeld(data, readLock(join(data, 'start.lock')), (line) => console.error(line))) process.exit(1);
}
