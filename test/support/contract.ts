import { EventEnvelope, eventSchema, EventName, webhookBody } from '@sb/contracts';
import type { Queryable } from '@sb/runtime';
import { expect } from 'vitest';

/** Every row of every table of the services' schemas, as text: what a database dump would show. */
async function dumpDatabase(db: Queryable): Promise<string> {
  const { rows: tables } = await db.query<{ schema: string; name: string }>(
    `SELECT table_schema AS schema, table_name AS name FROM information_schema.tables
      WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2`,
  );
  expect(tables.length).toBeGreaterThan(5);
  const parts: string[] = [];
  for (const t of tables) {
    const { rows } = await db.query<{ j: string }>(`SELECT row_to_json(x)::text AS j FROM "${t.schema}"."${t.name}" x`);
    parts.push(`-- ${t.schema}.${t.name}`, ...rows.map((r) => r.j));
  }
  return parts.join('\n');
}

/** No secret the test created is stored anywhere in plain text (hashed or sealed only, or never stored). */
export async function expectNoSecretAtRest(db: Queryable, secrets: Record<string, string[]>): Promise<void> {
  const dump = await dumpDatabase(db);
  let checked = 0;
  for (const [kind, values] of Object.entries(secrets)) {
    expect(values.length, `${kind}: the test created none to look for`).toBeGreaterThan(0);
    for (const v of values) {
      expect(v.length, kind).toBeGreaterThanOrEqual(16);
      expect(dump.includes(v), `${kind} ${v.slice(0, 6)}… is stored in plain text`).toBe(false);
      // A JSON-escaped copy (inside a stored JSON document) would hide from a plain search.
      expect(dump.includes(JSON.stringify(v).slice(1, -1)), kind).toBe(false);
      checked++;
    }
  }
  expect(checked).toBeGreaterThan(0);
}

/**
 * Every event the services recorded (their outboxes) is a valid envelope, and the body its webhooks get
 * (webhookBody: a lone plan.archived gets subscription_id '' there) matches its event's schema: the
 * OpenAPI `webhooks`.
 */
export async function expectEventsMatchSchemas(db: Queryable): Promise<Record<string, number>> {
  const { rows: schemas } = await db.query<{ schema: string }>(
    `SELECT table_schema AS schema FROM information_schema.tables WHERE table_name = 'outbox' AND table_type = 'BASE TABLE'`,
  );
  const seen: Record<string, number> = {};
  for (const { schema } of schemas) {
    const { rows } = await db.query<{ payload: EventEnvelope }>(`SELECT payload FROM "${schema}".outbox ORDER BY seq`);
    for (const { payload } of rows) {
      expect(EventName.options, `${schema}: unknown event ${payload.event}`).toContain(payload.event);
      expect(EventEnvelope.safeParse(payload).success, JSON.stringify(payload)).toBe(true);
      const r = eventSchema(payload.event).safeParse(webhookBody(payload));
      expect(r.success ? [] : r.error.issues.map((i) => `${payload.event}.${i.path.join('.')}: ${i.message}`), JSON.stringify(payload)).toEqual([]);
      seen[payload.event] = (seen[payload.event] ?? 0) + 1;
    }
  }
  return seen;
}
