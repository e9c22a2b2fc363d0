import { outboxTableSql, type Migration } from '@sb/runtime';

/** Numbered, append-only: a released migration is never edited. */
export const migrations: Migration[] = [
  {
    id: 1,
    name: 'payments and outbox',
    sql: `
CREATE TABLE payments (
  id TEXT PRIMARY KEY,
  wallet_id TEXT NOT NULL,
  subscription_id TEXT NOT NULL,
  plan_id TEXT NOT NULL,
  plan_name TEXT NOT NULL,
  amount_sats BIGINT NOT NULL CHECK (amount_sats > 0),
  status TEXT NOT NULL CHECK (status IN ('pending', 'paid', 'failed', 'expired')),
  payment_method TEXT NOT NULL CHECK (payment_method IN ('lightning', 'onchain', 'nwc', 'cardproc', 'walletproc')),
  purpose TEXT NOT NULL CHECK (purpose IN ('checkout', 'renewal')),
  payment_request TEXT,
  payment_hash TEXT,
  provider TEXT NOT NULL,
  -- the charge id (charge server) or the payment hash (LNbits, dev): what callbacks and status reads name
  provider_ref TEXT,
  expires_at BIGINT NOT NULL,
  paid_at BIGINT,
  created_at BIGINT NOT NULL,
  idempotency_key TEXT NOT NULL,
  -- when the sweeper last asked the provider about it (round-robin over open payments)
  last_checked_at BIGINT,
  version INT NOT NULL DEFAULT 1,
  CONSTRAINT payments_idempotency UNIQUE (wallet_id, idempotency_key),
  CONSTRAINT payments_provider_ref UNIQUE (provider, provider_ref),
  CHECK ((status = 'paid') = (paid_at IS NOT NULL))
);
CREATE INDEX payments_by_wallet ON payments (wallet_id, created_at DESC, id DESC);
CREATE INDEX payments_by_subscription ON payments (subscription_id, created_at DESC, id DESC);
CREATE INDEX payments_pending_by_expiry ON payments (expires_at) WHERE status = 'pending';
${outboxTableSql}`,
  },
];
