import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../scripts/stack.mjs';

const run = promisify(execFile);

/**
 * A PostgreSQL server of the test's own (initdb + pg_ctl from the Debian packages), on its own port and
 * in its own temporary directory, that the test may stop and start: the shared server on 5432 is never
 * touched. As root (CI) the server runs as the `postgres` user, since initdb refuses root.
 */
export interface PgCluster {
  port: number;
  /** With `tls`: the CA file that signed the server's certificate (issued to `localhost`). */
  caFile?: string;
  /** Superuser URL of the cluster's `postgres` database. */
  adminUrl: string;
  /** `pg_ctl stop -m immediate`: every backend killed at once, as in a crash. */
  crash(): Promise<void>;
  /**
   * SIGSTOP to the server and every backend: connections stay open and nothing answers, as when the
   * database's host freezes or the network drops packets without a reset.
   */
  freeze(): void;
  /** SIGCONT to the processes `freeze` stopped. */
  thaw(): void;
  /** `pg_ctl start` (unless it runs), resolving once the server accepts connections. */
  start(): Promise<void>;
  /** Stops the server and removes its directory. */
  destroy(): Promise<void>;
}

function binDir(): string {
  const base = '/usr/lib/postgresql';
  const versions = existsSync(base) ? readdirSync(base).filter((v) => existsSync(join(base, v, 'bin', 'initdb'))) : [];
  const newest = versions.sort((a, b) => Number(b) - Number(a))[0];
  if (!newest) throw new Error('initdb not found under /usr/lib/postgresql (Debian: apt-get install postgresql)');
  return join(base, newest, 'bin');
}

/** The command line that runs `bin` as the server's owner: the postgres user when we are root. */
function asOwner(bin: string, args: string[]): [string, string[]] {
  return process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
}

/** Pids whose parent is `pid` (from /proc: procps may not be installed). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(name));
    } catch {
      /* exited meanwhile */
    }
  }
  return out;
}

/**
 * A CA and a server certificate for `localhost` signed by it, as CloudNativePG makes its own: a client
 * verifies the server only with the CA file (`sslrootcert`).
 */
async function makeCertificates(dir: string): Promise<{ caFile: string; certFile: string; keyFile: string }> {
  const f = (name: string) => join(dir, name);
  const ssl = (...args: string[]) => run('openssl', args, { encoding: 'utf8' });
  await ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=test database CA', '-keyout', f('ca.key'), '-out', f('ca.crt'));
  await ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', f('server.key'), '-out', f('server.csr'));
  writeFileSync(f('san.ext'), 'subjectAltName=DNS:localhost\n');
  await ssl(
    'x509',
    '-req',
    '-in',
    f('server.csr'),
    '-CA',
    f('ca.crt'),
    '-CAkey',
    f('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    f('san.ext'),
    '-out',
    f('server.crt'),
  );
  chmodSync(f('server.key'), 0o600);
  return { caFile: f('ca.crt'), certFile: f('server.crt'), keyFile: f('server.key') };
}

export async function startPgCluster(opts: { tls?: boolean } = {}): Promise<PgCluster> {
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), 'sb-pg-'));
  const data = join(dir, 'data');
  const logFile = join(dir, 'server.log');
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  const port = await freePort();
  const pgctl = (...args: string[]) => {
    const [cmd, argv] = asOwner(join(bin, 'pg_ctl'), ['-D', data, ...args]);
    return run(cmd, argv, { encoding: 'utf8' });
  };
  const [initCmd, initArgs] = asOwner(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync']);
  await run(initCmd, initArgs, { encoding: 'utf8' });
  // fsync off: an immediate stop kills processes, not the machine, so written data is in the OS cache.
  const tls = opts.tls ? await makeCertificates(dir) : undefined;
  if (tls && process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(tls.keyFile, uid, 0);
  }
  const options = [
    `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c shared_buffers=32MB`,
    ...(tls ? [`-c ssl=on -c ssl_cert_file=${tls.certFile} -c ssl_key_file=${tls.keyFile}`] : []),
  ].join(' ');
  const start = async () => {
    // Already running (a test that failed while it was down left it so for the next one)?
    if (
      await pgctl('status').then(
        () => true,
        () => false,
      )
    )
      return;
    try {
      await pgctl('-l', logFile, '-o', options, '-w', '-t', '60', 'start');
    } catch (err) {
      const log = existsSync(logFile) ? readFileSync(logFile, 'utf8').slice(-2000) : '';
      throw new Error(`private PostgreSQL did not start: ${(err as Error).message}\n${log}`);
    }
  };
  await start();
  // A test run that ends abruptly must not leave the server behind.
  const stopNow = () => {
    try {
      const [cmd, argv] = asOwner(join(bin, 'pg_ctl'), ['-D', data, '-m', 'immediate', 'stop']);
      execFileSync(cmd, argv, { stdio: 'ignore' });
    } catch {
      /* not running */
    }
  };
  let frozen: number[] = [];
  const thaw = () => {
    for (const pid of frozen.splice(0)) {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        /* gone */
      }
    }
  };
  const onExit = () => {
    thaw();
    stopNow();
  };
  process.once('exit', onExit);
  return {
    port,
    ...(tls ? { caFile: tls.caFile } : {}),
    freeze() {
      const postmaster = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
      frozen = [postmaster, ...childrenOf(postmaster)];
      for (const pid of frozen) process.kill(pid, 'SIGSTOP');
    },
    thaw,
    adminUrl: `postgres://postgres@127.0.0.1:${port}/postgres`,
    crash: async () => {
      await pgctl('-m', 'immediate', '-w', 'stop');
    },
    start,
    async destroy() {
      process.removeListener('exit', onExit);
      thaw();
      await pgctl('-m', 'fast', '-w', 'stop').catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
