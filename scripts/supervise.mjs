// Supervision of `npm start`'s children: a process that exits while the system runs is started again.

const FIRST_DELAY_MS = 1000;
const MAX_DELAY_MS = 30_000;
/** A process that stayed up this long is healthy again: its next restart waits the first delay. */
const STABLE_MS = 60_000;

/**
 * Keeps `first` (a started process: `{ name, child, stop }`) running: when its process exits for any
 * reason but `stop`, `restart()` replaces it after a backoff (1 s, doubling up to 30 s), and both the
 * exit and the restart are logged. `active()` false means the whole system is stopping (Ctrl-C reaches
 * every child at once): nothing is restarted then. Returns the stop function, which ends the current
 * process for good.
 */
export function supervise(first, restart, { active = () => true, log = (line) => console.error(line) } = {}) {
  let current = first;
  let stopped = false;
  let failures = 0;
  let timer;

  const watch = (svc) => {
    const since = Date.now();
    log(`[supervisor] ${svc.name} running as pid ${svc.child.pid}`);
    svc.child.once('exit', (code, signal) => {
      if (stopped || !active()) return;
      if (Date.now() - since >= STABLE_MS) failures = 0;
      const delay = Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** failures++);
      log(`[supervisor] ${svc.name} (pid ${svc.child.pid}) exited with ${signal ?? `code ${code}`}; restarting in ${delay} ms`);
      const again = async () => {
        if (stopped || !active()) return;
        try {
          current = await restart();
        } catch (err) {
          log(`[supervisor] ${svc.name} could not be restarted: ${err?.message ?? err}; trying again in ${MAX_DELAY_MS} ms`);
          timer = setTimeout(again, MAX_DELAY_MS);
          return;
        }
        if (stopped || !active()) return void (await current.stop());
        watch(current);
      };
      timer = setTimeout(again, delay);
    });
  };

  watch(first);
  return async () => {
    stopped = true;
    clearTimeout(timer);
    await current.stop();
  };
}
