import { BusClient, main, runService, SecretBox } from '@sb/runtime';
import { loadNwcConfig } from './config.js';
import { SCHEMA, type Deps } from './deps.js';
import { allHandlers } from './handlers/index.js';
import { Nip47Client } from './nip47.js';
import { AttemptsRepo } from './store/attempts.repo.js';
import { ConnectionsRepo } from './store/connections.repo.js';
import { migrations } from './store/migrations.js';
import { attemptsSweeper } from './sweeper.js';

main('nwc', () =>
  runService({
    name: 'nwc',
    schema: SCHEMA,
    migrations,
    loadConfig: loadNwcConfig,
    opsPortVar: 'NWC_OPS_PORT',
    async setup({ config, log, db, clock }) {
      const deps: Deps = {
        db,
        clock,
        log,
        connections: new ConnectionsRepo(SCHEMA),
        attempts: new AttemptsRepo(SCHEMA),
        // The wallet's reply timeout, the wait for a second answer, then confirming the preimage and asking
        // payments whether the invoice is paid (a bus call each), with room to spare.
        attemptLeaseMs: config.NWC_REPLY_TIMEOUT_MS + 2 * config.BUS_TIMEOUT_MS + 15_000,
        walletReplyMs: config.NWC_REPLY_TIMEOUT_MS,
        busTimeoutMs: config.BUS_TIMEOUT_MS,
        nip47: new Nip47Client({
          infoTimeoutMs: config.NWC_INFO_TIMEOUT_MS,
          replyTimeoutMs: config.NWC_REPLY_TIMEOUT_MS,
          relays: { allowPrivate: config.NWC_ALLOW_PRIVATE_RELAYS },
        }),
        bus: new BusClient(config, config.BUS_TIMEOUT_MS, 'nwc-client', log),
        secrets: new SecretBox(config.SECRETS_KEY, config.SECRETS_KEY_PREVIOUS),
      };
      await deps.bus.connect();
      const sweeper = attemptsSweeper(deps, config.NWC_SWEEP_INTERVAL_MS);
      return {
        handlers: allHandlers(deps),
        start: () => sweeper.start(),
        stop: async () => {
          await sweeper.stop();
          await deps.bus.close().catch(() => undefined);
        },
        ready: { info_timeout_ms: config.NWC_INFO_TIMEOUT_MS, reply_timeout_ms: config.NWC_REPLY_TIMEOUT_MS },
      };
    },
  }),
);
