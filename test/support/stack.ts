import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as natsConnect } from '@nats-io/transport-node';
import pg from 'pg';
import { inboxPrefix } from '@sb/contracts';
// The same launcher `npm start` and the benchmarks use.
import { API_PREFIX, createWallet, startNats, startService } from '../../scripts/stack.mjs';
import { dbUrlVar, dropDbRoles, provisionDbRoles } from '../../scripts/db-roles.mjs';
import { passwordVar } from '../../scripts/nats-config.mjs';

export const ADMIN_DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface WalletKeys {
  id: string;
  name: string;
  admin_key: string;
  invoice_key: string;
}

type Service = Awaited<ReturnType<typeof startService>>;

export interface StackInfo {
  api: string;
  gatewayUrl: string;
  billingOpsUrl: string;
  paymentsOpsUrl: string;
  nwcOpsUrl: string;
  databaseUrl: string;
  natsUrl: string;
  /** The NATS operator's credentials (every subject): tests that look into the bus connect with them. */
  natsOperator: { user?: string; pass?: string };
  /** Every NATS user's password (`NATS_PASSWORD_<USER>`), for tests of the permissions. */
  natsPasswords: Record<string, string>;
  /** Each service's own database role (its schema only). */
  serviceDbUrls: Record<string, string>;
  wallets: WalletKeys[];
}

export interface Stack extends StackInfo {
  env: Record<string, string>;
  /** The stack's database, for assertions on state (closed by stop()). */
  db: pg.Pool;
  services: { billing: Service; gateway: Service; payments: Service; nwc: Service; notifier: Service };
  restartBilling(): Promise<void>;
  stopBilling(): Promise<void>;
  restartPayments(): Promise<void>;
  stopPayments(): Promise<void>;
  restartNotifier(): Promise<void>;
  /** A new gateway process on the same port (the old one stopped first; a no-op when it was killed). */
  restartGateway(): Promise<void>;
  /**
   * The NATS server's configuration as it started, changed by `edit` (none: as it started), applied by a
   * reload (SIGHUP), as an operator applying another auth.conf. The caller waits for its effect.
   */
  reloadNats(edit?: (conf: string) => string): void;
  stop(): Promise<void>;
}

/** A database of its own for one stack, so stacks and reruns never see each other's rows. */
/** Whether a process with this pid is running. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function createDatabase(prefix: string, adminUrl = ADMIN_DATABASE_URL): Promise<{ url: string; name: string; drop: () => Promise<void> }> {
  const name = `${prefix}_${process.pid}_${Date.now().toString(36)}_${Math.floor(Math.random() * 1e6)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: async () => {
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/** The whole system as real processes: a private nats-server, billing, gateway, and `wallets` wallets. */
/** `adminUrl`: the server to create the stack's database on (default: the shared one, ADMIN_DATABASE_URL). */
export async function startStack(opts: { env?: Record<string, string>; wallets?: number; adminUrl?: string; gatewayPort?: number } = {}): Promise<Stack> {
  const db = await createDatabase('sb_test', opts.adminUrl);
  const natsDir = mkdtempSync(join(tmpdir(), 'sb-nats-'));
  // The production shape: every service with its own NATS user and PostgreSQL role (roles are
  // cluster-wide, so they are named after this stack's database).
  const nats = await startNats(natsDir, { secure: true });
  const natsConf = join(natsDir, 'nats.conf');
  const natsConfAtStart = readFileSync(natsConf, 'utf8');
  const rolePrefix = `${db.name}_`;
  const serviceDbUrls = await provisionDbRoles(db.url, { prefix: rolePrefix });
  const env: Record<string, string> = {
    DATABASE_URL: db.url,
    ...Object.fromEntries(Object.entries(serviceDbUrls).map(([s, u]) => [dbUrlVar(s), u])),
    ...nats.env,
    NATS_URL: nats.url,
    LIGHTNING_PROVIDER: 'dev',
    LOG_LEVEL: 'info',
    RATE_LIMIT_KEY_PER_SECOND: '10000',
    RATE_LIMIT_PUBLIC_GET_PER_MINUTE: '100000',
    RATE_LIMIT_PUBLIC_POST_PER_MINUTE: '100000',
    KEY_CACHE_TTL_MS: '500',
    // Short, so that a test of a request trickling in sees its 408 in seconds (the default is 30 s).
    HTTP_REQUEST_TIMEOUT_MS: '4000',
    DEV_MODE: '1',
    SECRETS_KEY: randomBytes(32).toString('hex'),
    SCHEDULER_INTERVAL_MS: '300',
    // Tests assert correctness, not latency: a loaded CI machine must not turn a slow answer into a 503.
    BUS_TIMEOUT_MS: '20000',
    PAYMENTS_SWEEP_INTERVAL_MS: '300',
    // The NWC tests run their relay on loopback.
    NWC_ALLOW_PRIVATE_RELAYS: '1',
    ...opts.env,
  };
  // Started side by side: none needs another to become ready, and starting Node is slow here. Whatever
  // started is stopped again if another one failed, so a failed start leaves no process behind.
  const started = await Promise.allSettled([
    startService('billing', env),
    startService('gateway', env, opts.gatewayPort ? { port: opts.gatewayPort } : {}),
    startService('payments', env),
    startService('nwc', env),
    startService('notifier', env),
  ]);
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) {
    await Promise.allSettled(started.map((r) => (r.status === 'fulfilled' ? r.value.stop() : undefined)));
    await nats.stop();
    rmSync(natsDir, { recursive: true, force: true });
    await db.drop().catch(() => undefined);
    await dropDbRoles(ADMIN_DATABASE_URL, { prefix: rolePrefix }).catch(() => undefined);
    throw failed.reason;
  }
  let [billing, gateway, payments, nwc, notifier] = started.map((r) => (r as PromiseFulfilledResult<Service>).value) as [
    Service,
    Service,
    Service,
    Service,
    Service,
  ];
  const wallets = await newWallets(db.url, opts.wallets ?? 2);
  const stack: Stack = {
    api: `${gateway.url}${API_PREFIX}`,
    gatewayUrl: gateway.url,
    billingOpsUrl: billing.url,
    paymentsOpsUrl: payments.url,
    nwcOpsUrl: nwc.url,
    databaseUrl: db.url,
    natsUrl: nats.url,
    natsOperator: nats.operator,
    natsPasswords: nats.env,
    serviceDbUrls,
    wallets,
    env,
    // A connection lost while idle (a test stopping the database) must not end the test process.
    db: new pg.Pool({ connectionString: db.url, max: 3 }).on('error', () => undefined),
    services: { billing, gateway, payments, nwc, notifier },
    async stopBilling() {
      await billing.stop();
    },
    // A restart stops the old process first (a no-op when it was killed): one still listening would
    // answer readiness for the new one, which would then die on its port.
    async restartBilling() {
      await billing.stop();
      billing = await startService('billing', env, { port: billing.port });
      stack.services.billing = billing;
    },
    async stopPayments() {
      await payments.stop();
    },
    async restartPayments() {
      await payments.stop();
      payments = await startService('payments', env, { port: payments.port });
      stack.services.payments = payments;
    },
    async restartGateway() {
      await gateway.stop();
      gateway = await startService('gateway', env, { port: gateway.port });
      stack.services.gateway = gateway;
    },
    async restartNotifier() {
      await notifier.stop();
      notifier = await startService('notifier', env, { port: notifier.port });
      stack.services.notifier = notifier;
    },
    reloadNats(edit = (conf) => conf) {
      writeFileSync(natsConf, edit(natsConfAtStart), { mode: 0o600 });
      nats.child.kill('SIGHUP');
    },
    async stop() {
      await Promise.allSettled([gateway.stop(), billing.stop(), payments.stop(), nwc.stop(), notifier.stop()]);
      await nats.stop();
      rmSync(natsDir, { recursive: true, force: true });
      await stack.db.end().catch(() => undefined);
      await db.drop().catch(() => undefined);
      await dropDbRoles(ADMIN_DATABASE_URL, { prefix: rolePrefix }).catch(() => undefined);
    },
  };
  return stack;
}

/** Wallets of a test file's own, so files sharing a stack never see each other's rows. */
export function newWallets(databaseUrl: string, n: number): Promise<WalletKeys[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => createWallet(databaseUrl, `test wallet ${i}`)));
}

export function info(s: Stack): StackInfo {
  const { api, gatewayUrl, billingOpsUrl, paymentsOpsUrl, nwcOpsUrl, databaseUrl, natsUrl, natsOperator, natsPasswords, serviceDbUrls, wallets } = s;
  return { api, gatewayUrl, billingOpsUrl, paymentsOpsUrl, nwcOpsUrl, databaseUrl, natsUrl, natsOperator, natsPasswords, serviceDbUrls, wallets };
}

/**
 * Whether the stack's NATS server refuses `user`'s publish to `subject` (what that service meets after
 * a reloadNats); undefined while the server is still reloading and refuses or stalls the connection
 * itself (an "Authorization Violation" or a dial timeout right after the SIGHUP, both seen in CI).
 */
export async function publishRefused(stack: Stack, user: string, subject: string): Promise<boolean | undefined> {
  const nc = await natsConnect({
    servers: stack.natsUrl,
    user,
    pass: stack.natsPasswords[passwordVar(user)],
    inboxPrefix: inboxPrefix(user),
    timeout: 3000,
  }).catch(() => undefined);
  if (!nc) return undefined;
  try {
    await nc.request(subject, new TextEncoder().encode('{}'), { timeout: 3000 });
    return false;
  } catch (err) {
    return /Permissions Violation for Publish/.test(String((err as Error).message));
  } finally {
    await nc.close();
  }
}
