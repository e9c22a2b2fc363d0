import { answeredRequestsTableSql, outboxTableSql, outboxTraceMigration, type Migration } from '@sb/runtime';

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
  {
    id: 2,
    name: 'every rail: on-chain, card and wallet processor fields, fiat amounts, processed callbacks',
    sql: `
ALTER TABLE payments ADD COLUMN onchain_address TEXT;
ALTER TABLE payments ADD COLUMN onchain_txid TEXT;
ALTER TABLE payments ADD COLUMN checkout_url TEXT;
-- card and wallet processor: the fiat amount charged, its currency and the rate used (fiat per BTC)
ALTER TABLE payments ADD COLUMN amount_fiat NUMERIC(20, 2);
ALTER TABLE payments ADD COLUMN currency TEXT;
ALTER TABLE payments ADD COLUMN fiat_rate NUMERIC(24, 8);
ALTER TABLE payments ADD COLUMN cardproc_payment_id TEXT;
ALTER TABLE payments ADD COLUMN walletproc_order_id TEXT;
ALTER TABLE payments ADD COLUMN failure_reason TEXT;
-- callbacks that carry an event id: each is applied once, however often it is delivered
CREATE TABLE processed_callbacks (
  provider TEXT NOT NULL,
  event_id TEXT NOT NULL,
  payment_id TEXT,
  received_at BIGINT NOT NULL,
  PRIMARY KEY (provider, event_id)
);
CREATE INDEX payments_by_onchain_address ON payments (onchain_address) WHERE onchain_address IS NOT NULL;`,
  },
  {
    id: 3,
    name: 'watch-only wallets of owners; the derivation index of each on-chain payment',
    sql: `
CREATE TABLE watchonly_wallets (
  id TEXT PRIMARY KEY,
  wallet_id TEXT NOT NULL,
  name TEXT NOT NULL,
  -- the extended public key as the owner gave it, and in xpub/tpub form (once per owner: two counters
  -- over one key would hand out the same addresses; across owners uniqueness would tell one owner that
  -- another registered a key, and let a key be squatted)
  xpub TEXT NOT NULL,
  normalized_key TEXT NOT NULL,
  key_type TEXT NOT NULL CHECK (key_type IN ('xpub', 'zpub', 'tpub', 'vpub')),
  network TEXT NOT NULL CHECK (network IN ('mainnet', 'testnet')),
  next_index INT NOT NULL DEFAULT 0 CHECK (next_index >= 0),
  created_at BIGINT NOT NULL
);
CREATE INDEX watchonly_wallets_by_wallet ON watchonly_wallets (wallet_id, created_at DESC, id DESC);
CREATE UNIQUE INDEX watchonly_wallets_one_key_per_owner ON watchonly_wallets (wallet_id, normalized_key);
ALTER TABLE payments ADD COLUMN watchonly_wallet_id TEXT REFERENCES watchonly_wallets (id);
ALTER TABLE payments ADD COLUMN derivation_index INT;
CREATE UNIQUE INDEX payments_derivation ON payments (watchonly_wallet_id, derivation_index) WHERE watchonly_wallet_id IS NOT NULL;`,
  },
  {
    id: 4,
    name: 'preimages of dev invoices',
    sql: `
-- Set only by the DEV Lightning provider (no money moves): a test wallet paying a dev invoice learns
-- its preimage, as it would from a real Lightning payment (NWC answers carry it).
ALTER TABLE payments ADD COLUMN dev_preimage TEXT;`,
  },
  {
    id: 5,
    name: 'paid payments billing could not apply',
    sql: `
-- Set by billing when a paid payment (a late one, say) could not be applied to any subscription: why.
-- The owner refunds it; GET /payments/{id} shows it.
ALTER TABLE payments ADD COLUMN unapplied_reason TEXT;`,
  },
  {
    id: 6,
    name: 'renewal payments a provider ended early, until billing has heard of it',
    // An older version ignores the column (it only tells billing less): a rollback past it works.
    compatible: true,
    sql: `
-- Set in the transaction that records the provider's end of a renewal payment (expired or failed at
-- the provider), cleared once billing answered; until then billing is told again no sooner than this time.
ALTER TABLE payments ADD COLUMN end_notice_at BIGINT;
CREATE INDEX payments_end_notice ON payments (end_notice_at) WHERE end_notice_at IS NOT NULL;`,
  },
  {
    id: 7,
    name: 'payments a provider says were paid another amount',
    // An older version ignores the column (it only logs the warning more often): a rollback past it works.
    compatible: true,
    sql: `
-- When a provider was first seen to say the payment was paid for another amount or currency (left
-- pending): the warning is logged that once, not on every status poll and sweep.
ALTER TABLE payments ADD COLUMN mismatch_seen_at BIGINT;`,
  },
  outboxTraceMigration,
  {
    id: 8,
    name: 'answers of owner writes by Idempotency-Key',
    // A table alone, which older code ignores.
    compatible: true,
    // The answer of each keyed write, in the write's transaction: a retry whose first answer was lost on
    // the bus gets it (answerOnce, @sb/runtime), never "already registered" for the wallet it made.
    sql: answeredRequestsTableSql,
  },
  {
    id: 9,
    name: 'paid payments billing applied',
    // An older version ignores the column (its status answers leave `applied` out, as before).
    compatible: true,
    sql: `
-- When billing applied this paid payment to a subscription: the public status says so, and until then
-- (nor unapplied_reason set) the checkout page does not yet say the subscription is active.
ALTER TABLE payments ADD COLUMN applied_at BIGINT;`,
  },
  {
    id: 10,
    name: 'payments paid before billing marked them applied',
    // Rows only, which an older version ignores.
    compatible: true,
    // Its own transaction, after the column's (whose table lock is then released): rows are locked, not
    // the table, while the paid payments are written.
    sql: `
-- Those paid before billing marked applied payments were applied (or marked unapplied) already.
UPDATE payments SET applied_at = paid_at WHERE status = 'paid' AND unapplied_reason IS NULL AND applied_at IS NULL;`,
  },
  {
    id: 11,
    name: 'checkout payments withdrawn for a late payment name it',
    // An older version ignores the column (its answers leave `replaced_by` out, as before).
    compatible: true,
    sql: `
-- A checkout payment withdrawn because a late payment of the contact's earlier checkout started its
-- subscription: that payment (found from outside: the page said "expired" and offered an invoice in vain).
ALTER TABLE payments ADD COLUMN replaced_by TEXT;`,
  },
  {
    id: 12,
    name: 'the period a paid payment paid for',
    // Nullable columns, which an older version ignores (its answers leave them out, as before).
    compatible: true,
    sql: `
-- The period billing applied this paid payment to (the subscriber's receipt names it).
ALTER TABLE payments ADD COLUMN period_start BIGINT;
ALTER TABLE payments ADD COLUMN period_end BIGINT;`,
  },
];
