import { AnsweredRequests, BusClient, main, runService } from '@sb/runtime';
import { CheckGate, PUBLIC_CHECK_INTERVAL_MS } from './check-gate.js';
import { loadPaymentsConfig } from './config.js';
import { SCHEMA, type Deps } from './deps.js';
import { allHandlers } from './handlers/index.js';
import { createRails, selectedProviders, webhookUrlOf } from './providers/registry.js';
import { RateSource } from './rates.js';
import { migrations } from './store/migrations.js';
import { PaymentsRepo } from './store/payments.repo.js';
import { WatchonlyRepo } from './store/watchonly.repo.js';
import { Sweeper } from './sweeper.js';

main('payments', () =>
  runService({
    name: 'payments',
    schema: SCHEMA,
    migrations,
    loadConfig: loadPaymentsConfig,
    opsPortVar: 'PAYMENTS_OPS_PORT',
    setup({ config, log, db, clock }) {
      const payments = new PaymentsRepo(SCHEMA);
      const watchonly = new WatchonlyRepo(SCHEMA);
      const next = (walletId: string, id: string) => watchonly.nextIndex(db, walletId, id);
      const take = (walletId: string, id: string, index: number) => watchonly.takeIndex(db, walletId, id, index);
      const devStatusOf = async (ref: string) => (await payments.byProviderRef(db, 'dev', ref))?.status;
      const inUse = async (address: string) => !!(await payments.byProviderRef(db, 'esplora', address));
      const rails = createRails({ config, clock, devStatusOf, watchonly: { next, take, inUse, log } });
      const webhookUrl = webhookUrlOf(config);
      if (!Object.keys(rails).length) log.warn('no *_PROVIDER is set: every payment will be refused');
      const usesDev = Object.values(rails).some((r) => r?.provider === 'dev');
      if (usesDev && !config.DEV_MODE) {
        log.warn('a dev provider without DEV_MODE: its payments cannot be paid by anyone (the dev pay endpoint needs DEV_MODE)');
      }
      if (Object.values(rails).some((r) => r?.provider !== 'dev') && !webhookUrl) {
        log.warn('PUBLIC_BASE_URL is not set: providers get no callback URL; payments are found by polling only');
      }
      const rates = new RateSource(
        {
          currency: config.FIAT_CURRENCY,
          ttlMs: config.FIAT_RATE_TTL_MS,
          timeoutMs: config.PROVIDER_TIMEOUT_MS,
          ...(config.FIAT_RATE_URL ? { url: config.FIAT_RATE_URL } : {}),
          ...(config.FIAT_RATE_FIXED ? { fixed: config.FIAT_RATE_FIXED } : {}),
        },
        () => clock.nowMs(),
      );
      const deps: Deps = {
        db,
        clock,
        log,
        devMode: config.DEV_MODE,
        payments,
        watchonly,
        // What they hold is what GET shows (never the key itself): payments has no SECRETS_KEY to seal with.
        answered: new AnsweredRequests(SCHEMA, 'unsealed'),
        rails,
        providers: selectedProviders(config),
        rates,
        invoiceMaxExpiryS: config.INVOICE_MAX_EXPIRY_S,
        checks: new CheckGate(PUBLIC_CHECK_INTERVAL_MS),
        bus: new BusClient(config, config.BUS_TIMEOUT_MS, 'payments-client', log),
      };
      const sweeper = new Sweeper(deps, { intervalMs: config.PAYMENTS_SWEEP_INTERVAL_MS });
      const purge = deps.answered.purging(db, log);
      return {
        handlers: allHandlers(deps),
        start() {
          sweeper.start();
          purge.start();
        },
        async stop() {
          await sweeper.stop();
          await purge.stop();
          await deps.bus.close().catch(() => undefined);
        },
        ready: { rails: Object.fromEntries(Object.values(rails).map((r) => [r!.method, r!.provider])) },
      };
    },
  }),
);
