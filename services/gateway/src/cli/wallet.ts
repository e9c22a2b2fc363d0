import { parseArgs } from 'node:util';
// Only the database part of the runtime: the tool starts fast without the bus and Nest.
import { cliDatabaseUrl, createDb, migrate } from '@sb/runtime/db';
import { migrations } from '../store/migrations.js';
import { WalletsRepo, type WalletKeys } from '../store/wallets.repo.js';

const USAGE = `usage: npm run wallet -- <command> [options]
  create --name NAME [--json]     create a wallet and print its keys (shown once)
  list [--json]                   list wallets (no keys: only their hashes are stored)
  rotate-keys --id WALLET_ID [--json]  replace both keys of a wallet and print the new ones
DATABASE_URL selects the database; without it, the embedded database of a running 'npm start' is used.`;

function printKeys(k: WalletKeys, json: boolean): void {
  if (json) return void process.stdout.write(`${JSON.stringify(k)}\n`);
  process.stdout.write(
    `wallet:      ${k.id} (${k.name})\nadmin key:   ${k.admin_key}\ninvoice key: ${k.invoice_key}\n` +
      'These keys are shown once; only their hashes are stored.\n',
  );
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { name: { type: 'string' }, id: { type: 'string' }, json: { type: 'boolean', default: false }, help: { type: 'boolean' } },
  });
  const [command] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${USAGE}\n`);
    return command ? 0 : 2;
  }
  const db = createDb(cliDatabaseUrl(), { max: 1, applicationName: 'wallet-cli', preparedStatements: false });
  try {
    await migrate(db, 'gateway', migrations);
    const repo = new WalletsRepo('gateway');
    const json = values.json ?? false;
    if (command === 'create') {
      const name = values.name?.trim();
      if (!name || name.length > 200) throw new Error('--name is required (1 to 200 characters)');
      printKeys(await repo.create(db, name), json);
    } else if (command === 'list') {
      const rows = await repo.list(db);
      if (json) process.stdout.write(`${JSON.stringify(rows)}\n`);
      else for (const w of rows) process.stdout.write(`${w.id}\t${w.name}\tcreated ${new Date(w.created_at * 1000).toISOString()}\n`);
    } else if (command === 'rotate-keys') {
      if (!values.id) throw new Error('--id is required');
      const keys = await repo.rotate(db, values.id);
      if (!keys) throw new Error(`no wallet ${values.id}`);
      printKeys(keys, json);
    } else {
      process.stderr.write(`unknown command ${command}\n${USAGE}\n`);
      return 2;
    }
    return 0;
  } finally {
    await db.close();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`wallet: ${err.message}\n`);
    process.exit(1);
  },
);
