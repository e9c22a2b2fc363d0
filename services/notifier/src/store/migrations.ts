import { answeredRequestsTableSql, outboxTableSql, outboxTraceMigration, type Migration } from '@sb/runtime';

/** Numbered, append-only: a released migration is never edited. */
export const migrations: Migration[] = [
  {
    id: 1,
    name: 'webhook endpoints, deliveries, attempts, subscriber e-mails',
    sql: `
CREATE TABLE endpoints (
  id TEXT PRIMARY KEY,
  wallet_id TEXT NOT NULL,
  url TEXT NOT NULL,
  -- NULL: every event, also ones added later
  events TEXT[],
  plan_id TEXT,
  description TEXT,
  -- AES-256-GCM with SECRETS_KEY: it has to be opened again for every signature
  secret_sealed TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  -- soft delete: the delivery log of a deleted endpoint stays readable in the database
  deleted_at BIGINT
);
CREATE INDEX endpoints_wallet ON endpoints (wallet_id, id DESC) WHERE deleted_at IS NULL;

CREATE TABLE deliveries (
  id TEXT PRIMARY KEY,
  endpoint_id TEXT NOT NULL REFERENCES endpoints (id),
  wallet_id TEXT NOT NULL,
  event_id TEXT NOT NULL,
  event TEXT NOT NULL,
  -- the exact WebhookEvent sent, so a retry or replay signs the same bytes
  body TEXT NOT NULL,
  replay_of TEXT REFERENCES deliveries (id),
  status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
  attempt_count INT NOT NULL DEFAULT 0,
  first_attempt_at BIGINT,
  next_attempt_at BIGINT,
  last_status_code INT,
  last_error TEXT,
  delivered_at BIGINT,
  created_at BIGINT NOT NULL
);
-- a redelivered event never makes a second delivery; replays are deliveries of their own
CREATE UNIQUE INDEX deliveries_once ON deliveries (endpoint_id, event_id) WHERE replay_of IS NULL;
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_endpoint ON deliveries (endpoint_id, id DESC);

CREATE TABLE delivery_attempts (
  id BIGSERIAL PRIMARY KEY,
  delivery_id TEXT NOT NULL REFERENCES deliveries (id),
  attempted_at BIGINT NOT NULL,
  status_code INT,
  error TEXT,
  duration_ms INT NOT NULL
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, id);

-- one e-mail per (event, recipient), whatever the number of times the event is delivered to us
CREATE TABLE emails (
  event_id TEXT NOT NULL,
  recipient TEXT NOT NULL,
  wallet_id TEXT NOT NULL,
  event TEXT NOT NULL,
  subject TEXT NOT NULL,
  body TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
  attempt_count INT NOT NULL DEFAULT 0,
  next_attempt_at BIGINT NOT NULL,
  last_error TEXT,
  sent_at BIGINT,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (event_id, recipient)
);
CREATE INDEX emails_due ON emails (next_attempt_at) WHERE status = 'pending';

-- the runtime relays every service's outbox; the notifier emits no events of its own yet
${outboxTableSql}
`,
  },
  {
    id: 2,
    name: 'notification settings per wallet and plan; notifications on every channel with their attempts',
    sql: `
-- plan_id '' holds the wallet's defaults; a plan's row overrides them unless inherit
CREATE TABLE settings (
  wallet_id TEXT NOT NULL,
  plan_id TEXT NOT NULL,
  inherit BOOLEAN NOT NULL DEFAULT false,
  -- channels and events, no secret
  config JSONB,
  -- SMTP URL, bot token and Nostr key as one JSON document, AES-256-GCM with SECRETS_KEY
  secrets_sealed TEXT,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (wallet_id, plan_id)
);

-- one message per (event, audience, channel, recipient), whatever the number of times the event arrives
CREATE TABLE notifications (
  id TEXT PRIMARY KEY,
  wallet_id TEXT NOT NULL,
  event_id TEXT NOT NULL,
  event TEXT NOT NULL,
  audience TEXT NOT NULL CHECK (audience IN ('subscriber', 'owner')),
  channel TEXT NOT NULL CHECK (channel IN ('email', 'messenger', 'nostr')),
  recipient TEXT NOT NULL,
  subscription_id TEXT,
  plan_id TEXT,
  -- the settings row the message is sent with ('' = the wallet's)
  settings_plan_id TEXT NOT NULL,
  subject TEXT NOT NULL,
  -- subject, text and HTML; sealed: messages carry the subscriber's portal link (their token)
  body_sealed TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
  attempt_count INT NOT NULL DEFAULT 0,
  -- retries stop 3 days after this (the first attempt, or the owner's retry)
  retry_from BIGINT,
  next_attempt_at BIGINT,
  last_error TEXT,
  delivered_at BIGINT,
  created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX notifications_once ON notifications (event_id, audience, channel, recipient);
CREATE INDEX notifications_due ON notifications (next_attempt_at) WHERE status = 'pending';
CREATE INDEX notifications_wallet ON notifications (wallet_id, id DESC);

CREATE TABLE notification_attempts (
  id BIGSERIAL PRIMARY KEY,
  notification_id TEXT NOT NULL REFERENCES notifications (id),
  attempted_at BIGINT NOT NULL,
  error TEXT,
  permanent BOOLEAN NOT NULL,
  duration_ms INT NOT NULL
);
CREATE INDEX notification_attempts_of ON notification_attempts (notification_id, id);

-- subscriber e-mails now travel as notifications (the emails table stays as the record of earlier ones)
`,
  },
  outboxTraceMigration,
  {
    // Ids from 100 up sit clear of the numbered ones above (the runtime's shared migrations use them too).
    id: 101,
    name: 'trace context of webhook deliveries',
    sql: `
-- the trace of the event (or replay request) that made the delivery: each attempt is a span in it
ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS trace_context JSONB;`,
  },
  {
    id: 102,
    name: 'messenger bots polled for chats that pressed Start',
    sql: `
-- each configured bot: where its getUpdates stands, who polls it now (lease), its username for checkout pages
-- (token_hash: SHA-256 of the token getMe last confirmed for this bot id, never the token itself)
CREATE TABLE messenger_bots (
  bot_id BIGINT PRIMARY KEY,
  username TEXT,
  token_hash TEXT,
  next_offset BIGINT NOT NULL DEFAULT 0,
  lease_until BIGINT NOT NULL DEFAULT 0,
  lease_token TEXT,
  last_error TEXT,
  polled_at BIGINT
);
-- a Telegram username (lower case, no @) that pressed Start on a bot, and the private chat it opened
CREATE TABLE messenger_links (
  bot_id BIGINT NOT NULL,
  username TEXT NOT NULL,
  chat_id BIGINT NOT NULL,
  linked_at BIGINT NOT NULL,
  PRIMARY KEY (bot_id, username)
);`,
  },
  {
    id: 103,
    name: 'answers of owner writes by Idempotency-Key',
    // A table alone, which older code ignores.
    compatible: true,
    // The answer of each keyed write, in the write's transaction: a retry whose first answer was lost on
    // the bus gets it (answerOnce, @sb/runtime), never a second endpoint, replay or test message.
    sql: answeredRequestsTableSql,
  },
  {
    id: 104,
    name: 'due deliveries by endpoint',
    // An index alone, which older code does not need.
    compatible: true,
    // claimDue takes each endpoint's earliest due deliveries, a few per endpoint (a fair share).
    sql: `CREATE INDEX deliveries_endpoint_due ON deliveries (endpoint_id, next_attempt_at) WHERE status = 'pending';`,
  },
  {
    id: 105,
    name: 'the servers a notification goes through',
    // A column older code leaves empty (its rows count by wallet and channel) and an index it does not need.
    compatible: true,
    // claimDue takes each route's earliest due notifications, a share per route (a mail server that hangs
    // holds its own places only); the expression is routeSql (notifications.repo).
    sql: `
ALTER TABLE notifications ADD COLUMN IF NOT EXISTS route TEXT;
CREATE INDEX notifications_route_due ON notifications ((COALESCE(route, wallet_id || ':' || channel)), next_attempt_at) WHERE status = 'pending';`,
  },
];
