import 'reflect-metadata';
import { Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  connectNats, createBusServer, createDb, createLogger, createMetricsRegistry, DevClock, initTelemetry, migrate,
  natsReachable, OutboxRelay, registerHandlers, shutdownTelemetry, startOpsServer, systemClock, type Logger,
} from '@sb/runtime';
import { loadPaymentsConfig } from './config.js';
import { SCHEMA, type Deps } from './deps.js';
import { allHandlers } from './handlers/index.js';
import { createLightningProvider, webhookUrlOf } from './providers/index.js';
import { migrations } from './store/migrations.js';
import { PaymentsRepo } from './store/payments.repo.js';
import { Sweeper } from './sweeper.js';

@Module({})
class PaymentsModule {}

/** Nest's own log lines go through pino so every line on stdout is JSON. */
function nestLogger(log: Logger): LoggerService {
  return {
    log: (m) => log.info({ nest: true }, String(m)),
    error: (m) => log.error({ nest: true }, String(m)),
    warn: (m) => log.warn({ nest: true }, String(m)),
    debug: (m) => log.debug({ nest: true }, String(m)),
    verbose: (m) => log.trace({ nest: true }, String(m)),
  };
}

async function main(): Promise<void> {
  initTelemetry('payments');
  const config = loadPaymentsConfig();
  const log = createLogger('payments', config.LOG_LEVEL);
  const db = createDb(config.DATABASE_URL, { max: config.DB_POOL_MAX, applicationName: 'payments' });
  const applied = await migrate(db, SCHEMA, migrations);
  if (applied.length) log.info({ applied }, 'migrations applied');

  const nc = await connectNats(config.NATS_URL, 'payments');
  const clock = config.DEV_MODE ? await DevClock.start(nc) : systemClock;
  const payments = new PaymentsRepo(SCHEMA);
  const lightning = createLightningProvider(config, clock, async (ref) => (await payments.byProviderRef(db, 'dev', ref))?.status);
  const webhookUrl = webhookUrlOf(config);
  if (!config.LIGHTNING_PROVIDER) log.warn('LIGHTNING_PROVIDER is not set: every payment will be refused');
  if (config.LIGHTNING_PROVIDER === 'dev' && !config.DEV_MODE) {
    log.warn('LIGHTNING_PROVIDER=dev without DEV_MODE: dev invoices cannot be paid by anyone (the dev pay endpoint needs DEV_MODE)');
  }
  if (config.LIGHTNING_PROVIDER && config.LIGHTNING_PROVIDER !== 'dev' && !webhookUrl) {
    log.warn('PUBLIC_BASE_URL is not set: providers get no callback URL; payments are found by polling only');
  }
  const deps: Deps = { db, clock, log, devMode: config.DEV_MODE, payments, lightning, webhookUrl };

  const server = createBusServer(config.NATS_URL, 'payments');
  registerHandlers(server, allHandlers(deps), log);
  const app = await NestFactory.createMicroservice(PaymentsModule, { strategy: server, logger: nestLogger(log) });
  await app.listen();

  const relay = new OutboxRelay(db, SCHEMA, nc, log);
  await relay.start();
  const sweeper = new Sweeper(deps, { intervalMs: config.PAYMENTS_SWEEP_INTERVAL_MS });
  sweeper.start();

  const registry = createMetricsRegistry('payments');
  const ops = await startOpsServer(config.PAYMENTS_OPS_PORT, registry, async () => ({
    database: await db.ping(),
    bus: await natsReachable(nc),
  }));
  log.info({ ops_port: config.PAYMENTS_OPS_PORT, lightning_provider: lightning?.name ?? null, dev_mode: config.DEV_MODE }, 'payments ready');

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'payments stopping');
    ops.close();
    await app.close().catch(() => undefined);
    await sweeper.stop();
    await relay.stop();
    await nc.drain().catch(() => undefined);
    await db.close().catch(() => undefined);
    await shutdownTelemetry();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

main().catch((err) => {
  process.stderr.write(`payments failed to start: ${err?.stack ?? err}\n`);
  process.exit(1);
});
