import { EVENT_CONSUMERS } from '@sb/contracts';
import { AnsweredRequests, BusClient, DurableEventConsumer, main, Poller, runService, SecretBox } from '@sb/runtime';
import { loadNotifierConfig } from './config.js';
import { SCHEMA, type Deps } from './deps.js';
import { EventRecorder } from './events-consumer.js';
import { notifierMetrics } from './metrics.js';
import { allHandlers } from './handlers/index.js';
import { DeliveriesRepo } from './store/deliveries.repo.js';
import { EndpointsRepo } from './store/endpoints.repo.js';
import { migrations } from './store/migrations.js';
import { MessengerRepo } from './store/messenger.repo.js';
import { NotificationsRepo } from './store/notifications.repo.js';
import { SettingsRepo } from './store/settings.repo.js';
import { WalletNames } from './wallet-names.js';
import { notificationWorker, pollMessengerBots, WebhookWorker } from './workers.js';

main('notifier', () =>
  runService({
    name: 'notifier',
    schema: SCHEMA,
    migrations,
    loadConfig: loadNotifierConfig,
    opsPortVar: 'NOTIFIER_OPS_PORT',
    async setup({ config, log, db, nc, clock, registry }) {
      const bus = new BusClient(config, config.BUS_TIMEOUT_MS, 'notifier-client', log);
      const secrets = new SecretBox(config.SECRETS_KEY, config.SECRETS_KEY_PREVIOUS);
      const deps: Deps = {
        db,
        clock,
        log,
        endpoints: new EndpointsRepo(SCHEMA),
        deliveries: new DeliveriesRepo(SCHEMA),
        settings: new SettingsRepo(SCHEMA),
        notifications: new NotificationsRepo(SCHEMA),
        messenger: new MessengerRepo(SCHEMA),
        answered: new AnsweredRequests(SCHEMA, secrets),
        secrets,
        bus,
        walletNames: new WalletNames(bus, log),
        addresses: { allowPrivate: config.WEBHOOK_ALLOW_PRIVATE },
        webhookTimeoutMs: config.WEBHOOK_TIMEOUT_MS,
        metrics: notifierMetrics(registry),
        channels: {
          smtpUrl: config.SMTP_URL,
          mailFrom: config.MAIL_FROM,
          messengerApiUrl: config.MESSENGER_API_URL,
          timeoutMs: config.NOTIFY_TIMEOUT_MS,
          nip05Http: config.NIP05_ALLOW_HTTP,
        },
      };
      await deps.bus.connect();
      if (!config.SMTP_URL) log.warn("SMTP_URL is not set: e-mail goes out only through owners' own mail servers");
      if (config.WEBHOOK_ALLOW_PRIVATE) log.warn('WEBHOOK_ALLOW_PRIVATE is on: webhooks, relays and NIP-05 lookups may target loopback and private addresses');
      // Every domain event: deliveries to matching endpoints and notifications to subscribers and the owner.
      const recorder = new EventRecorder(deps);
      const consumer = new DurableEventConsumer(nc, {
        ...EVENT_CONSUMERS.notifier,
        handle: (e, meta) => recorder.record(e, meta.storedAtMs),
        log,
        db,
        schema: SCHEMA,
        registry,
        concurrency: config.NOTIFIER_EVENT_CONCURRENCY,
      });
      const webhooks = new WebhookWorker(deps, config.NOTIFIER_POLL_INTERVAL_MS);
      const notices = notificationWorker(deps, config.NOTIFIER_POLL_INTERVAL_MS);
      const pollers = [
        deps.answered.purging(db, log),
        ...(config.MESSENGER_POLL_MS > 0 ? [new Poller('messenger links', config.MESSENGER_POLL_MS, () => pollMessengerBots(deps), log)] : []),
      ];
      return {
        handlers: allHandlers(deps),
        async start() {
          await consumer.start();
          webhooks.start();
          notices.start();
          for (const p of pollers) p.start();
        },
        async stop() {
          await consumer.stop();
          await Promise.all([webhooks.stop(), notices.stop(), ...pollers.map((p) => p.stop())]);
          await deps.bus.close().catch(() => undefined);
        },
        ready: { mail: !!config.SMTP_URL, allow_private_webhooks: config.WEBHOOK_ALLOW_PRIVATE, webhook_timeout_ms: config.WEBHOOK_TIMEOUT_MS },
      };
    },
  }),
);
