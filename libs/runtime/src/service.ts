import { createBusServer, registerHandlers, type BusServer, type Handler } from './bus.js';
import { systemClock, type Clock } from './clock.js';
import { SettingError } from './config.js';
import { configuredDb, isDbUnavailable, migrateWhenReachable, type Db, type DbSettings, type Migration } from './db.js';
import { keepTrying } from './listener.js';
import { createLogger, type Logger } from './logger.js';
import { connectNatsWhenReachable, DevClock, natsOptions, natsReachable, type NatsConnection } from './nats.js';
import type { Registry } from 'prom-client';
import { createMetricsRegistry, startOpsServer } from './ops.js';
import { OutboxRelay } from './outbox.js';
import { initTelemetry, shutdownTelemetry } from './telemetry.js';

interface BaseConfig extends DbSettings {
  NATS_URL: string;
  LOG_LEVEL: string;
  DEV_MODE: boolean;
  OUTBOX_RETENTION_DAYS: number;
}

export interface ServiceBase<C> {
  config: C;
  log: Logger;
  db: Db;
  nc: NatsConnection;
  /** The test clock in DEV_MODE, else the system clock. */
  clock: Clock;
  devClock?: DevClock;
  /** The service's `/metrics`. */
  registry: Registry;
}

export interface ServiceParts {
  handlers: Handler[];
  /** Background work started once the service answers on the bus (schedulers, consumers). */
  start?: () => Promise<void> | void;
  stop?: () => Promise<void>;
  ready?: Record<string, unknown>;
}

/**
 * Boots a bus service the same way everywhere: telemetry, validated config, database with its
 * migrations, NATS, the test clock in DEV_MODE, the bus server in the service's queue group,
 * the outbox relay, the ops endpoints, and an orderly shutdown on SIGTERM/SIGINT.
 */
export async function runService<C extends BaseConfig>(opts: {
  name: string;
  schema: string;
  migrations: Migration[];
  loadConfig: () => C;
  /** The variable (of C) that holds the port of the ops endpoints. */
  opsPortVar: { [K in keyof C]: C[K] extends number ? K : never }[keyof C] & string;
  setup: (base: ServiceBase<C>) => Promise<ServiceParts> | ServiceParts;
}): Promise<void> {
  initTelemetry(opts.name);
  const config = opts.loadConfig();
  const log = createLogger(opts.name, config.LOG_LEVEL);
  guardProcess(log);
  const db = configuredDb(config, opts.name);
  // The ops endpoints come first: alive (/healthz) at once, ready (/readyz) only once the database
  // answered, the migrations ran and the service listens on the bus.
  let nc: NatsConnection | undefined;
  let server: BusServer | undefined;
  let parts: ServiceParts | undefined;
  let relay: OutboxRelay | undefined;
  let ops: { close(): void } | undefined;
  let started = false;
  let stopping = false;
  // From the start, not once started: a service still waiting for its database or JetStream (which may
  // never come) stops in order on SIGTERM, and with `npm start` gone (SB_PARENT_PID), instead of being
  // killed by the signal mid-request or outliving its supervisor. What is not up yet is skipped.
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, started }, `${opts.name} stopping`);
    ops?.close();
    // The requests being answered may call other services: the bus client of `parts` closes after them.
    await server?.close().catch(() => undefined);
    await parts?.stop?.().catch((err) => log.warn({ err }, 'stop failed'));
    await relay?.stop();
    await nc?.drain().catch(() => undefined);
    await db.close().catch(() => undefined);
    await shutdownTelemetry();
    process.exit(0);
  };
  stopOnSignals((why) => void stop(why));
  const registry = createMetricsRegistry(opts.name);
  const opsPort = config[opts.opsPortVar] as number;
  ops = await startOpsServer(
    opsPort,
    registry,
    async () => ({
      database: await db.ping(),
      // A subscription the server dropped or refused is being made again: not ready meanwhile.
      bus: (await natsReachable(nc)) && !!server?.listening,
      started,
    }),
    opts.opsPortVar,
  );
  // After each step that waits, a stop asked meanwhile ends the start (main() says nothing of it): nothing
  // more is set up (no bus subscription over a closed database) while the stop tears down what was.
  const step = async <T>(work: Promise<T>): Promise<T> => {
    const done = await work;
    if (stopping) throw new Error(`${opts.name} stopped while starting`);
    return done;
  };
  const applied = await step(migrateWhenReachable(db, opts.schema, opts.migrations, log));
  if (applied.length) log.info({ applied }, 'migrations applied');
  nc = await step(connectNatsWhenReachable(config, opts.name, log));
  // JetStream may not answer at first (a server still starting or busy, a permission not reloaded yet):
  // each start step on it is tried again until it does, as the connection is, rather than ending the
  // process (not ready meanwhile).
  const devClock = config.DEV_MODE ? await step(keepTrying('test clock not set up', () => DevClock.start(nc!), { log })) : undefined;
  parts = await step(Promise.resolve(opts.setup({ config, log, db, nc, clock: devClock ?? systemClock, devClock, registry })));
  server = createBusServer(config, opts.name);
  registerHandlers(server, parts.handlers, log);
  await step(server.listen());
  const outbox = new OutboxRelay(db, opts.schema, nc, log, {
    inboxPrefix: natsOptions(config, opts.name).inboxPrefix,
    retentionDays: config.OUTBOX_RETENTION_DAYS,
  });
  relay = outbox;
  outbox.watchBacklog(registry);
  await step(keepTrying('outbox relay not started: the events stream is not reachable', () => outbox.start(), { log }));
  await step(Promise.resolve(parts.start?.()));
  started = true;
  log.info({ ops_port: opsPort, dev_mode: config.DEV_MODE, ...parts.ready }, `${opts.name} ready`);
}

/**
 * The last line of defence: a database error that escaped every handler (an 'error' event or a
 * rejected promise nobody awaited) is logged and the process goes on; it recovers with the database.
 * Anything else is a bug: logged, and the process ends so that its supervisor restarts it.
 */
export function guardProcess(log: Logger): void {
  process.on('unhandledRejection', (err) => {
    if (isDbUnavailable(err)) return void log.error({ err }, 'unhandled database error (ignored)');
    log.fatal({ err }, 'unhandled rejection');
    process.exit(1);
  });
  process.on('uncaughtException', (err) => {
    if (isDbUnavailable(err)) return void log.error({ err }, 'uncaught database error (ignored)');
    log.fatal({ err }, 'uncaught exception');
    process.exit(1);
  });
}

/**
 * Stops on SIGTERM, SIGINT and SIGHUP (a closed terminal), and when the process that started it is gone
 * (SB_PARENT_PID, set by `npm start`): a local stack never outlives its supervisor.
 */
export function stopOnSignals(stop: (why: string) => void): void {
  const stopFor = (why: string) => {
    stopAsked = true;
    stop(why);
  };
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => stopFor(signal));
  const parent = Number(process.env.SB_PARENT_PID);
  if (parent > 0) setInterval(() => process.ppid !== parent && stopFor('parent exited'), 1000).unref();
}

/** A stop was asked for: a start step that fails from then on (its database closed under it) is no failure. */
let stopAsked = false;

/**
 * The entry point of a service: a failed start is said on stderr with exit code 1, in one line when it
 * is a setting to fix (the stack of a bug, which is not).
 */
export function main(name: string, run: () => Promise<void>): void {
  run().catch((err) => {
    if (stopAsked) return;
    process.stderr.write(`${name} failed to start: ${err instanceof SettingError ? err.message : (err?.stack ?? err)}\n`);
    process.exit(1);
  });
}
