import { createConnection, type Socket } from 'node:net';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { servePglite } from '../scripts/pglite-server.mjs';

/**
 * `npm start`'s embedded database server (scripts/pglite-server.mjs): every client shares PGlite's one
 * session in turns. A client that dies while it holds the session (killed with SIGKILL mid-transaction,
 * mid-query, between the messages of an exchange, during its startup) must give it back rolled back, and
 * the other clients, new connections included, must go on within a bounded wait.
 */
const BOUND_MS = 3000;
let db: PGlite;
let server: Awaited<ReturnType<typeof servePglite>>;
let url: string;
const open: { end(): Promise<void> }[] = [];

beforeAll(async () => {
  db = await PGlite.create();
  server = await servePglite(db, { port: 0 });
  url = `postgres://postgres@127.0.0.1:${server.port}/postgres`;
  const c = await connect();
  await c.query('CREATE TABLE t (n int)');
});
afterAll(async () => {
  for (const c of open) await c.end().catch(() => undefined);
  await server?.stop();
  await db?.close();
});
beforeEach(async () => {
  const c = await connect();
  await c.query('DELETE FROM t');
});

/** A pg client that gives up after BOUND_MS, connecting and querying alike. */
async function connect(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: BOUND_MS, query_timeout: BOUND_MS });
  c.on('error', () => undefined);
  await c.connect();
  open.push(c);
  return c;
}
/** Its socket ends with no goodbye, as when its process is killed with SIGKILL. */
const kill = (c: pg.Client) => (c as unknown as { connection: { stream: Socket } }).connection.stream.destroy();
const rows = async () => Number((await (await connect()).query('SELECT count(*) AS n FROM t')).rows[0].n);

// The wire protocol by hand, for states pg never leaves a connection in between two calls.
const msg = (type: string, ...parts: (string | number[])[]) => {
  const body = Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(`${p}\0`) : Buffer.from(p))));
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
};
const startup = () => {
  const body = Buffer.from('user\0postgres\0database\0postgres\0\0');
  const head = Buffer.alloc(8);
  head.writeInt32BE(8 + body.length, 0);
  head.writeInt32BE(196608, 4);
  return Buffer.concat([head, body]);
};
const parse = (sql: string) => msg('P', '', sql, [0, 0]);
const bind = () => msg('B', '', '', [0, 0, 0, 0, 0, 0]);
const execute = () => msg('E', '', [0, 0, 0, 0]);
const flush = () => msg('H');

/** A raw connection: `until(type)` waits for a message of that type from the server. */
async function wire() {
  const socket = createConnection({ port: server.port, host: '127.0.0.1' });
  await new Promise((resolve) => socket.once('connect', resolve));
  let got = Buffer.alloc(0);
  socket.on('data', (chunk) => {
    got = Buffer.concat([got, chunk]);
  });
  const types = () => {
    const out: string[] = [];
    for (let i = 0; i + 5 <= got.length; i += 1 + got.readInt32BE(i + 1)) out.push(String.fromCharCode(got[i]));
    return out;
  };
  const until = async (type: string, count = 1) => {
    const deadline = Date.now() + BOUND_MS;
    while (types().filter((t) => t === type).length < count) {
      if (Date.now() > deadline) throw new Error(`no '${type}' from the server (got ${types().join('')})`);
      await new Promise((r) => setTimeout(r, 10));
    }
    return types();
  };
  return { socket, until };
}

describe('the embedded database server when a client dies', () => {
  it('keeps a live transaction to itself: others wait for its COMMIT, then see its work', async () => {
    const a = await connect();
    const b = await connect();
    await a.query('BEGIN');
    await a.query('INSERT INTO t VALUES (1)');
    let answered = false;
    const seen = b.query('SELECT count(*) AS n FROM t').then((r) => ((answered = true), Number(r.rows[0].n)));
    await new Promise((r) => setTimeout(r, 300));
    expect(answered).toBe(false);
    await a.query('COMMIT');
    expect(await seen).toBe(1);
  });

  it.each([
    ['idle in its transaction', async (a: pg.Client) => void (await a.query('INSERT INTO t VALUES (1)'))],
    [
      'in a failed transaction',
      async (a: pg.Client) => {
        await a.query('INSERT INTO t VALUES (1)');
        await expect(a.query('SELECT 1/0')).rejects.toThrow(/division by zero/);
      },
    ],
    [
      'in the middle of a query',
      async (a: pg.Client) => {
        await a.query('INSERT INTO t VALUES (1)');
        void a.query('SELECT pg_sleep(0.3)').catch(() => undefined);
        await new Promise((r) => setTimeout(r, 20));
      },
    ],
  ])('killed %s: its work is rolled back and the others go on', async (_state, put) => {
    const a = await connect();
    const b = await connect();
    await a.query('BEGIN');
    await put(a);
    // Sent while the dead client still holds the session, as the other services' queries were.
    const waiting = b.query('SELECT count(*) AS n FROM t');
    kill(a);
    expect(Number((await waiting).rows[0].n)).toBe(0);
    expect(await rows()).toBe(0);
    // The session is free: a transaction of another client starts and commits.
    await b.query('BEGIN');
    await b.query('INSERT INTO t VALUES (2)');
    await b.query('COMMIT');
    expect(await rows()).toBe(1);
  });

  it('killed between the messages of an extended-protocol exchange inside a transaction', async () => {
    const b = await connect();
    const a = await wire();
    a.socket.write(startup());
    await a.until('Z');
    a.socket.write(msg('Q', 'BEGIN'));
    await a.until('Z', 2);
    // Parse and Bind sent, its Execute and Sync never: the batch never runs.
    a.socket.write(Buffer.concat([parse('INSERT INTO t VALUES (1)'), bind()]));
    const waiting = b.query('SELECT count(*) AS n FROM t');
    a.socket.destroy();
    expect(Number((await waiting).rows[0].n)).toBe(0);
  });

  it('killed after a flushed Execute, before its Sync: nobody runs inside its exchange, its row is gone', async () => {
    const b = await connect();
    const a = await wire();
    a.socket.write(startup());
    await a.until('Z');
    a.socket.write(Buffer.concat([parse('INSERT INTO t VALUES (1)'), bind(), execute(), flush()]));
    await a.until('C');
    // Run inside a's exchange, b's Sync would commit a's row with its own.
    const waiting = b.query('SELECT count(*) AS n FROM t');
    await new Promise((r) => setTimeout(r, 200));
    a.socket.destroy();
    expect(Number((await waiting).rows[0].n)).toBe(0);
    expect(await rows()).toBe(0);
  });

  it('killed during its startup: the others connect and query', async () => {
    const half = await wire();
    half.socket.write(startup().subarray(0, 12));
    half.socket.destroy();
    const whole = await wire();
    whole.socket.write(startup());
    whole.socket.destroy();
    expect(await rows()).toBe(0);
  });

  it('stop() ends with clients still connected, one of them inside a transaction', async () => {
    const own = await PGlite.create();
    const other = await servePglite(own, { port: 0 });
    const c = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${other.port}/postgres`, connectionTimeoutMillis: BOUND_MS });
    c.on('error', () => undefined);
    await c.connect();
    await c.query('BEGIN');
    const stopped = await Promise.race([other.stop().then(() => true), new Promise((r) => setTimeout(() => r(false), BOUND_MS))]);
    expect(stopped).toBe(true);
    const closed = await Promise.race([own.close().then(() => true), new Promise((r) => setTimeout(() => r(false), BOUND_MS))]);
    expect(closed).toBe(true);
  });
});
