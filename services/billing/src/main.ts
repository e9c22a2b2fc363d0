import { EVENT_CONSUMERS } from '@sb/contracts';
import { AnsweredRequests, BusClient, DurableEventConsumer, main, runService, SecretBox } from '@sb/runtime';
import { loadBillingConfig } from './config.js';
import { SCHEMA, type Deps } from './deps.js';
import { paymentMethodsOf } from './payments-client.js';
import { allHandlers } from './handlers/index.js';
import { applyPaymentEvent } from './payment-events.js';
import { Scheduler, SWEEP_PASS_ROWS } from './scheduler.js';
import { migrations } from './store/migrations.js';
import { PlansRepo } from './store/plans.repo.js';
import { SubscribersRepo } from './store/subscribers.repo.js';
import { AppliedPaymentsRepo } from './store/applied-payments.repo.js';
import { SubscriptionsRepo } from './store/subscriptions.repo.js';

main('billing', () =>
  runService({
    name: 'billing',
    schema: SCHEMA,
    migrations,
    loadConfig: loadBillingConfig,
    opsPortVar: 'BILLING_OPS_PORT',
    async setup({ config, log, db, nc, clock, devClock, registry }) {
      const policy = { dunning_days: config.DUNNING_DAYS };
      const bus = new BusClient(config, config.BUS_TIMEOUT_MS, 'billing-client', log);
      const secrets = new SecretBox(config.SECRETS_KEY, config.SECRETS_KEY_PREVIOUS);
      const deps: Deps = {
        methods: paymentMethodsOf(bus, config.PAYMENT_METHODS_TTL_MS),
        db,
        clock,
        devClock,
        log,
        plans: new PlansRepo(SCHEMA),
        subscriptions: new SubscriptionsRepo(SCHEMA, policy),
        subscribers: new SubscribersRepo(SCHEMA),
        appliedPayments: new AppliedPaymentsRepo(SCHEMA),
        answered: new AnsweredRequests(SCHEMA, secrets),
        policy,
        bus,
        secrets,
        publicBaseUrl: config.PUBLIC_BASE_URL,
        localNip05: config.NIP05_ALLOW_HTTP,
      };
      await deps.bus.connect();
      const purge = deps.answered.purging(db, log);
      const scheduler = new Scheduler(deps, config.SCHEDULER_INTERVAL_MS, policy, SWEEP_PASS_ROWS, config.SCHEDULER_CONCURRENCY);
      // Each paid payment, applied to its subscription once.
      const paymentEvents = new DurableEventConsumer(nc, {
        ...EVENT_CONSUMERS.billingPayments,
        handle: (e) => applyPaymentEvent(deps, e),
        log,
        db,
        schema: SCHEMA,
        registry,
        retryDelaysMs: config.EVENT_RETRY_DELAYS_MS,
      });
      return {
        handlers: allHandlers(deps, scheduler),
        async start() {
          await paymentEvents.start();
          scheduler.start();
          purge.start();
        },
        async stop() {
          await scheduler.stop();
          await purge.stop();
          await paymentEvents.stop().catch(() => undefined);
          await deps.bus.close().catch(() => undefined);
        },
      };
    },
  }),
);
