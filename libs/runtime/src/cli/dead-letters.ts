import { parseArgs } from 'node:util';
import { cliDatabaseUrl, createDb } from '../db.js';

const USAGE = `usage: npm run dead-letters -- <command> [options]
  list [--schema S] [--json]                  events parked after their last retry failed
  replay --id EVENT_ID [--schema S] [--consumer C]   run one parked event again (the service does it within seconds)
  replay --all [--schema S] [--consumer C]    run every parked event again
--schema: the service's schema (billing, notifier); default billing. A replayed event that is handled leaves
the list; one that fails again stays, with its new error.
DATABASE_URL selects the database; without it, the embedded database of a running 'npm start' is used.`;

async function main(): Promise<number> {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      schema: { type: 'string', default: 'billing' },
      consumer: { type: 'string' },
      id: { type: 'string' },
      all: { type: 'boolean' },
      json: { type: 'boolean' },
    },
  });
  const schema = values.schema!;
  if (!/^[a-z_]+$/.test(schema)) throw new Error('--schema must be a schema name such as billing');
  const command = positionals[0];
  if (command !== 'list' && command !== 'replay') {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const db = createDb(cliDatabaseUrl(), { max: 1, applicationName: 'dead-letters', preparedStatements: false });
  try {
    const exists = await db.query<{ t: string | null }>(`SELECT to_regclass($1) AS t`, [`${schema}.dead_letters`]);
    if (!exists.rows[0]?.t) {
      process.stdout.write(values.json ? '[]\n' : `no dead letters in ${schema}\n`);
      return 0;
    }
    if (command === 'list') {
      const { rows } = await db.query<Record<string, unknown>>(
        `SELECT consumer, event_id, event, error, deliveries, replays, extract(epoch FROM parked_at)::bigint AS parked_at, replay_requested_at IS NOT NULL AS replay_requested
         FROM ${schema}.dead_letters WHERE ($1::text IS NULL OR consumer = $1) ORDER BY parked_at`,
        [values.consumer ?? null],
      );
      if (values.json) process.stdout.write(`${JSON.stringify(rows)}\n`);
      else if (!rows.length) process.stdout.write('no parked events\n');
      else
        for (const r of rows)
          process.stdout.write(
            `${r.consumer}  ${r.event_id}  ${r.event}  deliveries=${r.deliveries} replays=${r.replays}${r.replay_requested ? ' (replay requested)' : ''}\n    ${r.error}\n`,
          );
      return 0;
    }
    if (!values.all && !values.id) throw new Error('replay needs --id EVENT_ID or --all');
    const { rowCount } = await db.query(
      `UPDATE ${schema}.dead_letters SET replay_requested_at = now()
       WHERE ($1::text IS NULL OR event_id = $1) AND ($2::text IS NULL OR consumer = $2)`,
      [values.all ? null : values.id, values.consumer ?? null],
    );
    process.stdout.write(values.json ? `${JSON.stringify({ requested: rowCount })}\n` : `replay requested for ${rowCount} event(s)\n`);
    return rowCount ? 0 : 1;
  } finally {
    await db.close();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`${err?.message ?? err}\n`);
    process.exit(1);
  },
);
