import type { BusClient, Clock, Db, Logger, SecretBox } from '@sb/runtime';
import type { Nip47Client } from './nip47.js';
import type { AttemptsRepo } from './store/attempts.repo.js';
import type { ConnectionsRepo } from './store/connections.repo.js';

export const SCHEMA = 'nwc';

/** After this many failed payments in a row a connection is deactivated and its subscription renews by invoice. */
export const MAX_CONSECUTIVE_FAILURES = 3;

/** What handlers need, passed in explicitly. */
export interface Deps {
  db: Db;
  clock: Clock;
  log: Logger;
  connections: ConnectionsRepo;
  attempts: AttemptsRepo;
  /**
   * How long a charge attempt holds its payment before another may ask the wallet again (the replica
   * charging it stopped): longer than the wallet's reply timeout and the bus calls after it.
   */
  attemptLeaseMs: number;
  /** NWC_REPLY_TIMEOUT_MS: how long a wallet has to answer a pay_invoice request. */
  walletReplyMs: number;
  /** BUS_TIMEOUT_MS: with a message's own wait, how long a caller waits for a charge's answer. */
  busTimeoutMs: number;
  nip47: Nip47Client;
  /** Requests to billing and payments. */
  bus: BusClient;
  /** Seals connection secrets at rest. */
  secrets: SecretBox;
}
