import { outboxTableSql, outboxTraceMigration, type Migration } from '@sb/runtime';

/** Numbered, append-only: a released migration is never edited. */
export const migrations: Migration[] = [
  {
    id: 1,
    name: 'wallet connections and outbox',
    sql: `
CREATE TABLE connections (
  id TEXT PRIMARY KEY,
  -- the owner (tenant), the subscriber and the subscription this wallet pays for
  wallet_id TEXT NOT NULL,
  subscriber_id TEXT NOT NULL,
  subscription_id TEXT NOT NULL,
  -- for the events this service emits (nwc.wallet_disabled carries the plan like every event)
  plan_id TEXT NOT NULL,
  plan_name TEXT NOT NULL,
  wallet_pubkey TEXT NOT NULL,
  -- the first relay (shown in the portal) and all of them (used)
  relay_url TEXT NOT NULL,
  relays TEXT[] NOT NULL,
  -- the client secret, AES-256-GCM with SECRETS_KEY; NULL once the connection is disconnected or
  -- deactivated: a secret that will never be used again is not kept
  secret_sealed TEXT,
  encryption TEXT NOT NULL CHECK (encryption IN ('nip44_v2', 'nip04')),
  max_amount_sats BIGINT CHECK (max_amount_sats > 0),
  is_active BOOLEAN NOT NULL DEFAULT true,
  last_used_at BIGINT,
  last_error TEXT,
  last_error_code TEXT,
  consecutive_failures INT NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
  created_at BIGINT NOT NULL,
  updated_at BIGINT,
  disconnected_at BIGINT,
  CHECK (is_active = (secret_sealed IS NOT NULL))
);
CREATE INDEX connections_by_subscriber ON connections (subscriber_id, created_at DESC, id DESC);
CREATE INDEX connections_by_subscription ON connections (subscription_id) WHERE is_active;
${outboxTableSql}`,
  },
  {
    id: 2,
    name: 'the subscriber contact of a connection',
    sql: `
-- Where the subscriber hears that their wallet was disconnected after failing (nwc.wallet_disabled).
ALTER TABLE connections ADD COLUMN subscriber_email TEXT;
ALTER TABLE connections ADD COLUMN subscriber_name TEXT;`,
  },
  {
    id: 3,
    name: 'charge attempts',
    // A table the previous version does not read: it runs on this schema too (a rollback is allowed).
    compatible: true,
    sql: `
-- One row per pay_invoice request sent to a wallet for a payment. At most one is in flight per payment
-- (outcome NULL): concurrent charges of the payment, on any replica, wait for it instead of asking the
-- wallet again. lease_until (database time: the dev clock may jump) frees a payment whose charging
-- replica died; the request's NIP-40 expiration ends before it, so the wallet cannot pay that one later.
CREATE TABLE charge_attempts (
  id TEXT PRIMARY KEY,
  payment_id TEXT NOT NULL,
  connection_id TEXT NOT NULL,
  wallet_pubkey TEXT NOT NULL,
  started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  lease_until TIMESTAMPTZ NOT NULL,
  outcome TEXT CHECK (outcome IN ('paid', 'failed', 'abandoned')),
  error_code TEXT,
  error_message TEXT,
  finished_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX charge_attempts_in_flight ON charge_attempts (payment_id) WHERE outcome IS NULL;
CREATE INDEX charge_attempts_by_payment ON charge_attempts (payment_id, started_at);`,
  },
  {
    id: 4,
    name: 'unconfirmed preimages and pruning of charge attempts',
    // A column and indexes the previous version ignores: a rollback is allowed.
    compatible: true,
    sql: `
-- The preimage of a paid attempt while the payments service has not confirmed it (it was away when the
-- wallet answered): confirmed again by the sweeper and by the next charge of the payment, whose wallet
-- is never asked again. NULL once confirmed (and for every attempt not paid).
ALTER TABLE charge_attempts ADD COLUMN unconfirmed_preimage TEXT;
CREATE INDEX charge_attempts_unconfirmed ON charge_attempts (finished_at) WHERE unconfirmed_preimage IS NOT NULL;
-- Finished attempts are deleted after 30 days, a bounded batch per sweep.
CREATE INDEX charge_attempts_finished ON charge_attempts (finished_at) WHERE outcome IS NOT NULL;`,
  },
  {
    id: 5,
    name: 'what a charge attempt paid for',
    // Columns the previous version neither writes nor reads: a rollback is allowed.
    compatible: true,
    sql: `
-- The payment's amount and purpose, so that a failure found after the charge answered (a kept preimage
-- the payments service refused later) is announced like any other. NULL on rows of earlier versions.
-- request_key: the checkout request's Idempotency-Key (as the gateway hashed it), so that the same request
-- sent again is answered the wallet's recorded refusal instead of asking the wallet again.
-- late_looked_at: when the sweeper last found a failed attempt's invoice unpaid (its next look waits longer).
ALTER TABLE charge_attempts ADD COLUMN amount_sats BIGINT, ADD COLUMN purpose TEXT, ADD COLUMN request_key TEXT, ADD COLUMN late_looked_at TIMESTAMPTZ;`,
  },
  outboxTraceMigration,
];
