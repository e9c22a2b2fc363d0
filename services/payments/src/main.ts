import { main, runService } from '@sb/runtime';
import { loadPaymentsConfig } from './config.js';
import { SCHEMA, type Deps } from './deps.js';
import { allHandlers } from './handlers/index.js';
import { createLightningProvider, webhookUrlOf } from './providers/index.js';
import { migrations } from './store/migrations.js';
import { PaymentsRepo } from './store/payments.repo.js';
import { Sweeper } from './sweeper.js';

main('payments', () =>
  runService({
    name: 'payments',
    schema: SCHEMA,
    migrations,
    loadConfig: loadPaymentsConfig,
    opsPort: (c) => c.PAYMENTS_OPS_PORT,
    setup({ config, log, db, clock }) {
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
      const deps: Deps = { db, clock, log, devMode: config.DEV_MODE, payments, lightning, webhookUrl, invoiceMaxExpiryS: config.INVOICE_MAX_EXPIRY_S };
      const sweeper = new Sweeper(deps, { intervalMs: config.PAYMENTS_SWEEP_INTERVAL_MS });
      return {
        handlers: allHandlers(deps),
        start: () => sweeper.start(),
        stop: () => sweeper.stop(),
        ready: { lightning_provider: lightning?.name ?? null },
      };
    },
  }),
);
