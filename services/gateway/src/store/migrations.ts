import type { Migration } from '@sb/runtime/db';

/** Numbered, append-only: a released migration is never edited. */
export const migrations: Migration[] = [
  {
    id: 1,
    name: 'wallets and idempotency keys',
    sql: `
CREATE TABLE wallets (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  admin_key_hash TEXT NOT NULL UNIQUE,
  invoice_key_hash TEXT NOT NULL UNIQUE,
  created_at BIGINT NOT NULL,
  keys_rotated_at BIGINT
);
CREATE TABLE idempotency_keys (
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  request_hash TEXT NOT NULL,
  status_code INT,
  response_body JSONB,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
`,
  },
];
