import { EVENT_CONSUMERS } from '@sb/contracts';
import { createTransport } from 'nodemailer';
import { DurableEventConsumer, main, Poller, runService, SecretBox } from '@sb/runtime';
import { loadNotifierConfig } from './config.js';
import { SCHEMA, type Deps } from './deps.js';
import { recordEvent } from './events-consumer.js';
import { allHandlers } from './handlers/index.js';
import { DeliveriesRepo } from './store/deliveries.repo.js';
import { EmailsRepo } from './store/emails.repo.js';
import { EndpointsRepo } from './store/endpoints.repo.js';
import { migrations } from './store/migrations.js';
import { deliverDue, mailDue, SMTP_TIMEOUT_MS } from './workers.js';

main('notifier', () =>
  runService({
    name: 'notifier',
    schema: SCHEMA,
    migrations,
    loadConfig: loadNotifierConfig,
    opsPort: (c) => c.NOTIFIER_OPS_PORT,
    setup({ config, log, db, nc, clock }) {
      const deps: Deps = {
        db, clock, log,
        endpoints: new EndpointsRepo(SCHEMA),
        deliveries: new DeliveriesRepo(SCHEMA),
        emails: new EmailsRepo(SCHEMA),
        secrets: new SecretBox(config.SECRETS_KEY, config.SECRETS_KEY_PREVIOUS),
        addresses: { allowPrivate: config.WEBHOOK_ALLOW_PRIVATE },
        webhookTimeoutMs: config.WEBHOOK_TIMEOUT_MS,
        mailEnabled: !!config.SMTP_URL,
      };
      if (!config.SMTP_URL) log.warn('SMTP_URL is not set: subscriber e-mails are not sent');
      if (config.WEBHOOK_ALLOW_PRIVATE) log.warn('WEBHOOK_ALLOW_PRIVATE is on: webhooks may target loopback and private addresses');
      // Every domain event: deliveries to matching endpoints and the subscriber's e-mail.
      const consumer = new DurableEventConsumer(nc, { ...EVENT_CONSUMERS.notifier, handle: (e) => recordEvent(deps, e), log });
      const pollers = [new Poller('webhooks', config.NOTIFIER_POLL_INTERVAL_MS, () => deliverDue(deps), log)];
      if (config.SMTP_URL) {
        // Bounded, so a mail's lease (workers.ts) outlasts its slowest send.
        const transport = createTransport({ url: config.SMTP_URL, connectionTimeout: SMTP_TIMEOUT_MS, greetingTimeout: SMTP_TIMEOUT_MS, socketTimeout: SMTP_TIMEOUT_MS });
        pollers.push(new Poller('mail', config.NOTIFIER_POLL_INTERVAL_MS, () => mailDue(deps, transport, config.MAIL_FROM), log));
      }
      return {
        handlers: allHandlers(deps),
        async start() {
          await consumer.start();
          for (const p of pollers) p.start();
        },
        async stop() {
          await consumer.stop();
          await Promise.all(pollers.map((p) => p.stop()));
        },
        ready: { mail: !!config.SMTP_URL, allow_private_webhooks: config.WEBHOOK_ALLOW_PRIVATE, webhook_timeout_ms: config.WEBHOOK_TIMEOUT_MS },
      };
    },
  }),
);
