import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
// The same launcher `npm start` and the benchmarks use.
import { API_PREFIX, createWallet, startNats, startService } from '../../scripts/stack.mjs';

export const ADMIN_DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface WalletKeys {
  id: string;
  name: string;
  admin_key: string;
  invoice_key: string;
}

export interface StackInfo {
  api: string;
  gatewayUrl: string;
  billingOpsUrl: string;
  databaseUrl: string;
  natsUrl: string;
  wallets: WalletKeys[];
}

export interface Stack extends StackInfo {
  env: Record<string, string>;
  services: { billing: Awaited<ReturnType<typeof startService>>; gateway: Awaited<ReturnType<typeof startService>> };
  restartBilling(): Promise<void>;
  stopBilling(): Promise<void>;
  stop(): Promise<void>;
}

/** A database of its own for one stack, so stacks and reruns never see each other's rows. */
export async function createDatabase(prefix: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `${prefix}_${process.pid}_${Date.now().toString(36)}_${Math.floor(Math.random() * 1e6)}`;
  const admin = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/** The whole system as real processes: a private nats-server, billing, gateway, and `wallets` wallets. */
export async function startStack(opts: { env?: Record<string, string>; wallets?: number } = {}): Promise<Stack> {
  const db = await createDatabase('sb_test');
  const natsDir = mkdtempSync(join(tmpdir(), 'sb-nats-'));
  const nats = await startNats(natsDir);
  const env: Record<string, string> = {
    DATABASE_URL: db.url,
    NATS_URL: nats.url,
    LIGHTNING_PROVIDER: 'dev',
    LOG_LEVEL: 'info',
    RATE_LIMIT_KEY_PER_SECOND: '10000',
    RATE_LIMIT_PUBLIC_GET_PER_MINUTE: '100000',
    RATE_LIMIT_PUBLIC_POST_PER_MINUTE: '100000',
    KEY_CACHE_TTL_MS: '500',
    ...opts.env,
  };
  // Started side by side: neither needs the other to become ready, and starting Node is slow here.
  let [billing, gateway] = await Promise.all([startService('billing', env), startService('gateway', env)]);
  const wallets = await newWallets(db.url, opts.wallets ?? 2);
  const stack: Stack = {
    api: `${gateway.url}${API_PREFIX}`,
    gatewayUrl: gateway.url,
    billingOpsUrl: billing.url,
    databaseUrl: db.url,
    natsUrl: nats.url,
    wallets,
    env,
    services: { billing, gateway },
    async stopBilling() {
      await billing.stop();
    },
    async restartBilling() {
      billing = await startService('billing', env, { port: billing.port });
      stack.services.billing = billing;
    },
    async stop() {
      await Promise.allSettled([gateway.stop(), billing.stop()]);
      await nats.stop();
      rmSync(natsDir, { recursive: true, force: true });
      await db.drop().catch(() => undefined);
    },
  };
  return stack;
}

/** Wallets of a test file's own, so files sharing a stack never see each other's rows. */
export function newWallets(databaseUrl: string, n: number): Promise<WalletKeys[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => createWallet(databaseUrl, `test wallet ${i}`)));
}

export function info(s: Stack): StackInfo {
  const { api, gatewayUrl, billingOpsUrl, databaseUrl, natsUrl, wallets } = s;
  return { api, gatewayUrl, billingOpsUrl, databaseUrl, natsUrl, wallets };
}
