import 'reflect-metadata';
import { Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  BusClient, connectNats, createBusServer, createDb, createLogger, createMetricsRegistry, DevClock, initTelemetry, migrate,
  natsReachable, OutboxRelay, registerHandlers, SecretBox, shutdownTelemetry, startOpsServer, systemClock, type Logger,
} from '@sb/runtime';
import { loadBillingConfig } from './config.js';
import { SCHEMA, type Deps } from './deps.js';
import { methodAvailability } from './domain/availability.js';
import { allHandlers } from './handlers/index.js';
import { migrations } from './store/migrations.js';
import { PaymentEventsConsumer } from './payment-events.js';
import { Scheduler } from './scheduler.js';
import { PlansRepo } from './store/plans.repo.js';
import { SubscribersRepo } from './store/subscribers.repo.js';
import { SubscriptionsRepo } from './store/subscriptions.repo.js';

@Module({})
class BillingModule {}

/** Nest's own log lines go through pino so every line on stdout is JSON. */
export function nestLogger(log: Logger): LoggerService {
  return {
    log: (m) => log.info({ nest: true }, String(m)),
    error: (m) => log.error({ nest: true }, String(m)),
    warn: (m) => log.warn({ nest: true }, String(m)),
    debug: (m) => log.debug({ nest: true }, String(m)),
    verbose: (m) => log.trace({ nest: true }, String(m)),
  };
}

async function main(): Promise<void> {
  initTelemetry('billing');
  const config = loadBillingConfig();
  const log = createLogger('billing', config.LOG_LEVEL);
  const db = createDb(config.DATABASE_URL, { max: config.DB_POOL_MAX, applicationName: 'billing' });
  const applied = await migrate(db, SCHEMA, migrations);
  if (applied.length) log.info({ applied }, 'migrations applied');

  const nc = await connectNats(config.NATS_URL, 'billing');
  const devClock = config.DEV_MODE ? await DevClock.start(nc) : undefined;
  const deps: Deps = {
    db,
    clock: devClock ?? systemClock,
    devClock,
    log,
    availability: methodAvailability({ lightningProvider: config.LIGHTNING_PROVIDER }),
    plans: new PlansRepo(SCHEMA),
    subscriptions: new SubscriptionsRepo(SCHEMA),
    subscribers: new SubscribersRepo(SCHEMA),
    bus: new BusClient(config.NATS_URL, config.BUS_TIMEOUT_MS, 'billing-client'),
    secrets: new SecretBox(config.SECRETS_KEY),
    publicBaseUrl: config.PUBLIC_BASE_URL,
  };
  await deps.bus.connect();
  const scheduler = new Scheduler(deps, config.SCHEDULER_INTERVAL_MS);
  const server = createBusServer(config.NATS_URL, 'billing');
  registerHandlers(server, allHandlers(deps, scheduler), log);
  const app = await NestFactory.createMicroservice(BillingModule, { strategy: server, logger: nestLogger(log) });
  await app.listen();

  const relay = new OutboxRelay(db, SCHEMA, nc, log);
  await relay.start();
  const paymentEvents = new PaymentEventsConsumer(deps, nc);
  await paymentEvents.start();
  scheduler.start();

  const registry = createMetricsRegistry('billing');
  const ops = await startOpsServer(config.BILLING_OPS_PORT, registry, async () => ({
    database: await db.ping(),
    bus: await natsReachable(nc),
  }));
  log.info({ ops_port: config.BILLING_OPS_PORT }, 'billing ready');

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'billing stopping');
    ops.close();
    await scheduler.stop();
    await paymentEvents.stop().catch(() => undefined);
    await app.close().catch(() => undefined);
    await relay.stop();
    await deps.bus.close().catch(() => undefined);
    await nc.drain().catch(() => undefined);
    await db.close().catch(() => undefined);
    await shutdownTelemetry();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

main().catch((err) => {
  process.stderr.write(`billing failed to start: ${err?.stack ?? err}\n`);
  process.exit(1);
});
