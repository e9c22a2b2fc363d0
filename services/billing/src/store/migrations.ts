import { outboxTableSql, type Migration } from '@sb/runtime';

/** Numbered, append-only: a released migration is never edited. */
export const migrations: Migration[] = [
  {
    id: 1,
    name: 'plans and outbox',
    sql: `
CREATE TABLE plans (
  id TEXT PRIMARY KEY,
  wallet_id TEXT NOT NULL,
  name TEXT NOT NULL,
  description TEXT,
  amount_sats BIGINT NOT NULL CHECK (amount_sats > 0),
  interval TEXT NOT NULL CHECK (interval IN ('weekly', 'monthly', 'yearly')),
  trial_days INT NOT NULL CHECK (trial_days BETWEEN 0 AND 365),
  grace_period_days INT NOT NULL CHECK (grace_period_days BETWEEN 0 AND 90),
  allow_lightning BOOLEAN NOT NULL,
  allow_onchain BOOLEAN NOT NULL,
  allow_nwc BOOLEAN NOT NULL,
  allow_cardproc BOOLEAN NOT NULL,
  allow_walletproc BOOLEAN NOT NULL,
  watchonly_wallet_id TEXT,
  cardproc_account_id TEXT,
  walletproc_merchant_id TEXT,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  is_deleted BOOLEAN NOT NULL DEFAULT false,
  archived_at BIGINT,
  version INT NOT NULL DEFAULT 1
);
CREATE INDEX plans_by_wallet ON plans (wallet_id, is_deleted, created_at DESC, id DESC);
${outboxTableSql}`,
  },
];
