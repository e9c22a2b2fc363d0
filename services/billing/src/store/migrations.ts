import { answeredRequestsTableSql, outboxTableSql, outboxTraceMigration, type Migration } from '@sb/runtime';

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

migrations.push({
  id: 2,
  name: 'subscribers, subscriptions, applied payments',
  sql: `
CREATE TABLE subscribers (
  id TEXT PRIMARY KEY,
  wallet_id TEXT NOT NULL,
  email TEXT,
  name TEXT,
  messenger TEXT,
  nostr TEXT,
  token_hash TEXT NOT NULL UNIQUE,
  token_sealed TEXT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX subscribers_one_per_email ON subscribers (wallet_id, lower(email)) WHERE email IS NOT NULL;
CREATE INDEX subscribers_by_wallet ON subscribers (wallet_id, created_at DESC, id DESC);

CREATE TABLE subscriptions (
  id TEXT PRIMARY KEY,
  wallet_id TEXT NOT NULL,
  plan_id TEXT NOT NULL REFERENCES plans (id),
  subscriber_id TEXT NOT NULL REFERENCES subscribers (id),
  status TEXT NOT NULL,
  payment_method TEXT NOT NULL,
  amount_sats BIGINT NOT NULL,
  interval TEXT NOT NULL,
  grace_period_days INT NOT NULL,
  period_anchor BIGINT NOT NULL,
  period_index INT NOT NULL,
  current_period_start BIGINT NOT NULL,
  current_period_end BIGINT NOT NULL,
  trial_end BIGINT,
  cancelled_at BIGINT,
  cancel_reason TEXT,
  receive_confirmations BOOLEAN NOT NULL,
  receive_reminders BOOLEAN NOT NULL,
  metadata JSONB NOT NULL DEFAULT '{}',
  renewal_payment_id TEXT,
  renewal_for BIGINT,
  reminded_for BIGINT,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  version INT NOT NULL DEFAULT 1
);
-- One live subscription per subscriber and plan: concurrent identical checkouts make one.
CREATE UNIQUE INDEX subscriptions_one_live ON subscriptions (subscriber_id, plan_id)
  WHERE status IN ('pending', 'active', 'paused', 'past_due', 'payment_failed');
CREATE INDEX subscriptions_by_wallet ON subscriptions (wallet_id, created_at DESC, id DESC);
CREATE INDEX subscriptions_due ON subscriptions (current_period_end) WHERE status IN ('pending', 'active', 'past_due');
CREATE INDEX subscriptions_by_plan ON subscriptions (plan_id);

CREATE TABLE applied_payments (
  payment_id TEXT PRIMARY KEY,
  subscription_id TEXT NOT NULL,
  applied_at BIGINT NOT NULL
);
`,
});

migrations.push({
  id: 3,
  name: 'renewal invoices reissued on expiry',
  sql: `
-- When the open renewal payment stops being payable; the scheduler issues a new one while the
-- subscription can still be renewed.
ALTER TABLE subscriptions ADD COLUMN renewal_expires_at BIGINT;
-- Every renewal payment issued, with the period it pays for: a late payment of an expired (replaced)
-- invoice of the current period still renews it.
CREATE TABLE renewal_payments (
  payment_id TEXT PRIMARY KEY,
  subscription_id TEXT NOT NULL,
  period_end BIGINT NOT NULL
);
`,
});

migrations.push({
  id: 4,
  name: 'withdrawal of replaced renewal invoices; subscriber reminder cadence',
  sql: `
-- A renewal paid late through a replaced invoice withdraws the open replacement; kept with the
-- application so a redelivered event retries the withdrawal until it succeeded.
ALTER TABLE applied_payments ADD COLUMN withdraw_payment_id TEXT;
-- When a renewal reminder last went to the subscriber: replacements of an expired invoice notify at
-- most weekly (the first issue and the last call always do).
ALTER TABLE subscriptions ADD COLUMN reminder_notified_at BIGINT;
`,
});

migrations.push({
  id: 5,
  name: 'NWC renewals: charged at period end, retried in the grace period, invoice fallback',
  sql: `
-- When the wallet of an NWC subscription is asked again to pay the open renewal (after 1 h, then daily,
-- while the grace period lasts); NULL when no attempt is pending (none yet, or the last one was paid).
ALTER TABLE subscriptions ADD COLUMN nwc_next_attempt_at BIGINT;
-- The wallet was deactivated or disconnected: the subscription renews by invoice from then on.
ALTER TABLE subscriptions ADD COLUMN nwc_fallback BOOLEAN NOT NULL DEFAULT false;
`,
});

migrations.push({
  id: 6,
  name: 'NWC charge in flight',
  sql: `
-- Set while a replica waits for the wallet's answer: another replica must not lapse the period meanwhile.
ALTER TABLE subscriptions ADD COLUMN nwc_charging_since BIGINT;
`,
});

migrations.push({
  id: 7,
  name: 'lifecycle without dead ends: pending_since, next_due_at, late payments not applied, checkout keys',
  sql: `
-- A pending subscription expires 24 h after it became pending (checkout or resume), whatever is updated later.
ALTER TABLE subscriptions ADD COLUMN pending_since BIGINT;
-- A checkout never activated (no period, no trial) became pending when it was created; a resumed one at its last update.
UPDATE subscriptions SET pending_since = CASE WHEN period_index = 0 AND trial_end IS NULL THEN created_at ELSE updated_at END
  WHERE status = 'pending';
-- When the scheduler must next look at the row (computed by domain/schedule.ts on every save); 0: now.
ALTER TABLE subscriptions ADD COLUMN next_due_at BIGINT;
UPDATE subscriptions SET next_due_at = 0 WHERE status IN ('pending', 'active', 'past_due', 'payment_failed');
CREATE INDEX subscriptions_next_due ON subscriptions (next_due_at) WHERE next_due_at IS NOT NULL;
-- Every paid payment is recorded once: applied to a subscription, or not applied and why (the owner refunds it).
ALTER TABLE applied_payments ADD COLUMN unapplied_reason TEXT;
-- A late payment that activated the contact's newer pending checkout instead: that one's checkout payment is withdrawn.
ALTER TABLE applied_payments ADD COLUMN withdraw_checkout BOOLEAN NOT NULL DEFAULT false;
-- The (hashed, scoped) Idempotency-Key of the checkout that created the subscription: a retry answers the same checkout.
ALTER TABLE subscriptions ADD COLUMN checkout_key TEXT;
CREATE INDEX subscriptions_checkout_key ON subscriptions (wallet_id, checkout_key) WHERE checkout_key IS NOT NULL;
`,
});

migrations.push({
  // Numbered apart from the lifecycle's migrations developed alongside (ids need not be contiguous).
  id: 10,
  name: "subscribers' preferred notification channel",
  sql: `
-- 'email', 'messenger' or 'nostr': where the notifier sends this subscriber's notices (NULL: every contact given).
ALTER TABLE subscribers ADD COLUMN contact_preference TEXT CHECK (contact_preference IN ('email', 'messenger', 'nostr'));
`,
});

migrations.push(outboxTraceMigration);

migrations.push({
  id: 11,
  name: 'renewal payments by subscription; periods re-anchored by an extend',
  sql: `
-- An extend moves the period the subscription's renewal payments were issued for (subscriptions.extend).
CREATE INDEX renewal_payments_subscription ON renewal_payments (subscription_id, period_end);
-- An extend re-anchors the periods at the new end (domain/lifecycle.ts): the period it did so in.
ALTER TABLE subscriptions ADD COLUMN anchor_index INT NOT NULL DEFAULT 0;
`,
});

migrations.push({
  id: 12,
  name: 'anchor_index where an early migration 11 left it out',
  compatible: true,
  // A commit between two releases had migration 11 as the index alone: a database migrated by it has id
  // 11 recorded and no column (found from outside). Everywhere else the column exists and this is a no-op.
  sql: `
ALTER TABLE subscriptions ADD COLUMN IF NOT EXISTS anchor_index INT NOT NULL DEFAULT 0;
`,
});

migrations.push({
  id: 13,
  name: 'renewal payments to withdraw',
  // A column with a default and an index, which older code ignores.
  compatible: true,
  sql: `
-- A renewal payment a sweep made and could not link (the subscription moved meanwhile): expired at the
-- payments service, and flagged until that is done, so a crash in between still leaves it to a later sweep.
ALTER TABLE renewal_payments ADD COLUMN withdraw BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX renewal_payments_withdraw ON renewal_payments (payment_id) WHERE withdraw;
`,
});

migrations.push({
  id: 14,
  name: 'immediate cancels',
  // A column with a default, which older code ignores.
  compatible: true,
  sql: `
-- A cancel that ended the period at once: a checkout paid before it but handled after is not applied.
ALTER TABLE subscriptions ADD COLUMN cancelled_immediately BOOLEAN NOT NULL DEFAULT false;
`,
});

migrations.push({
  id: 15,
  name: 'answers of owner writes by Idempotency-Key',
  // A table alone, which older code ignores.
  compatible: true,
  // The answer of each keyed write, in the write's transaction: a retry whose first answer was lost on
  // the bus gets it (answerOnce, @sb/runtime), never the write done twice.
  sql: answeredRequestsTableSql,
});

migrations.push({
  id: 16,
  name: 'who cancelled',
  // A nullable column, which older code ignores (its cancels leave it null: told from the reason as before).
  compatible: true,
  sql: `
-- Who cancelled (subscriber, merchant, plan_archived), from where the cancel came in: cancel_reason is
-- the owner's free text and may say anything.
ALTER TABLE subscriptions ADD COLUMN cancelled_by TEXT CHECK (cancelled_by IN ('subscriber', 'merchant', 'plan_archived'));
`,
});

migrations.push({
  id: 17,
  name: 'dunning window kept through an extend',
  // A nullable column, which older code ignores (and a value it leaves behind is ignored once stale).
  compatible: true,
  sql: `
-- Where the dunning window of a payment_failed subscription starts once an extend moved its period end
-- (the end of the grace of the period that lapsed); null: the end of the current period's grace.
ALTER TABLE subscriptions ADD COLUMN dunning_from BIGINT;
`,
});

migrations.push({
  id: 18,
  name: 'when a subscription was paused',
  // A nullable column, which older code ignores (its pauses leave it null: a renewal paid before one of
  // those and handled after stays not applied, as before).
  compatible: true,
  sql: `
-- When the owner paused the subscription (null once resumed): a renewal paid before it, handled after,
-- is still applied.
ALTER TABLE subscriptions ADD COLUMN paused_at BIGINT;
`,
});

migrations.push({
  id: 19,
  name: 'the millisecond of a pause or a cancel',
  // A nullable column, which older code ignores (its moves leave it null: a payment in their second is
  // taken to have come after them, as before).
  compatible: true,
  sql: `
-- The instant, to the millisecond, of the pause or cancel that stopped renewals: a payment recorded in
-- the same second is ordered by it.
ALTER TABLE subscriptions ADD COLUMN stopped_at_ms BIGINT;
`,
});

migrations.push({
  id: 20,
  name: 'no index on current_period_end',
  // Older code reads nothing through it either: the scheduler finds due rows by next_due_at (migration 7).
  compatible: true,
  sql: `
-- Unused since the scheduler looks rows up by next_due_at, and costly: every checkout inserted into it and
-- every renewal (which moves current_period_end) updated it.
DROP INDEX IF EXISTS subscriptions_due;
`,
});

migrations.push({
  id: 21,
  name: 'the newest invoice of a checkout',
  // A nullable column, which older code ignores (it walks a checkout's invoices from the first, as before).
  compatible: true,
  sql: `
-- The idempotency key of the newest invoice a checkout waiting for its first payment was given: a fresh one
-- follows it, without walking every invoice the checkout ran through.
ALTER TABLE subscriptions ADD COLUMN checkout_invoice_key TEXT;
`,
});

migrations.push({
  id: 22,
  name: 'a renewal payment refused',
  // Nullable columns, which older code ignores (it asks again at every sweep, as before).
  compatible: true,
  sql: `
-- The period end whose renewal payment the payments service refused to make (the rail off, a price under
-- the card processor's minimum), when, and its words: the period lapses on time and the ask is made
-- again a day later, rather than at every sweep with the subscription kept active past its end.
ALTER TABLE subscriptions ADD COLUMN renewal_refused_for BIGINT;
ALTER TABLE subscriptions ADD COLUMN renewal_refused_at BIGINT;
ALTER TABLE subscriptions ADD COLUMN renewal_refused_reason TEXT;
`,
});

migrations.push({
  id: 23,
  name: 'the period a payment paid for',
  // Nullable columns, which older code ignores (its receipts name no period, as before).
  compatible: true,
  sql: `
-- The period an applied payment paid for (the subscription's period after it): its replay tells the
-- payments service the same, and the subscriber's receipt names it.
ALTER TABLE applied_payments ADD COLUMN period_start BIGINT;
ALTER TABLE applied_payments ADD COLUMN period_end BIGINT;
`,
});
