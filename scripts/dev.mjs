// Development helpers against a running `npm start` (DEV_MODE): pay a dev Lightning payment, move the
// test clock. Both call the dev-only HTTP endpoints, which do not exist outside DEV_MODE.
//   npm run dev -- pay <payment_id>
//   npm run dev -- clock [--advance-days N] [--advance-seconds N]   (needs ADMIN_KEY)
import { parseArgs } from 'node:util';

const API = (process.env.API_URL || `http://127.0.0.1:${process.env.PORT || 8080}`) + '/subscriptions_manager/api/v1';
const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: { 'advance-days': { type: 'string' }, 'advance-seconds': { type: 'string' } },
});
const [command, arg] = positionals;

async function call(method, path, body, headers = {}) {
  const res = await fetch(API + path, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  }).catch((err) => {
    // fetch says only "fetch failed": the reason (refused, unknown host) is its cause.
    throw new Error(`no answer from ${API} (${err.cause?.code ?? err.cause?.message ?? err.message}): start the stack first with npm start (or set API_URL)`);
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${res.status} ${text}`);
  return JSON.parse(text);
}

/** A whole, non-negative number given to `--name` (0 when not given); anything else is refused here. */
function count(name) {
  const v = values[name];
  if (v === undefined) return 0;
  if (!/^\d+(\.\d+)?$/.test(v.trim())) throw new Error(`--${name} must be a number of at least 0, not "${v}"`);
  return Number(v);
}

try {
  if (command === 'pay' && arg) {
    console.log(JSON.stringify(await call('POST', `/dev/payments/${arg}/pay`), null, 2));
  } else if (command === 'clock') {
    if (!process.env.ADMIN_KEY) throw new Error('set ADMIN_KEY to a wallet admin key');
    const seconds = count('advance-seconds') + count('advance-days') * 86_400;
    if (!Number.isInteger(seconds)) throw new Error('--advance-days and --advance-seconds together must make whole seconds');
    const r = await call('POST', '/dev/clock', { advance_seconds: seconds }, { 'X-Api-Key': process.env.ADMIN_KEY });
    console.log(`test clock: ${new Date(r.now * 1000).toISOString()} (offset ${r.offset_seconds} s)`);
  } else {
    console.log('usage: npm run dev -- pay <payment_id> | clock [--advance-days N] [--advance-seconds N]');
    process.exit(2);
  }
} catch (err) {
  console.error(`dev: ${err.message}`);
  process.exit(1);
}
