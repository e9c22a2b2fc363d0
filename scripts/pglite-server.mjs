// Serves one embedded PGlite database to several clients over the PostgreSQL wire protocol.
// PGlite has a single session, so clients take turns: a client's messages run together up to each Sync
// (extended protocol) or Query (simple protocol), and a client that leaves the session inside a
// transaction (or inside an extended-protocol exchange it only flushed) keeps it until that ends. Without
// this, one client's Parse/Bind could land between another's ("unnamed prepared statement does not
// exist") or inside its transaction. A client that goes away while it holds the session (killed
// mid-transaction, mid-query, between messages) gives it back rolled back, as a PostgreSQL backend aborts
// the transaction of a client whose connection ends.
import { createServer } from 'node:net';

const SSL_REQUEST = 80877103;
const CANCEL_REQUEST = 80877102;

const message = (type, body) => {
  const out = Buffer.alloc(5 + body.length);
  out.write(type, 0, 'latin1');
  out.writeInt32BE(4 + body.length, 1);
  body.copy(out, 5);
  return out;
};
const query = (sql) => message('Q', Buffer.from(`${sql}\0`));
// ROLLBACK ends an explicit transaction or an implicit one an unsynced Execute left open; a Sync ends an
// extended-protocol exchange (after an error PostgreSQL ignores everything up to it, that first ROLLBACK
// included), so a second ROLLBACK follows it. Each is harmless where there is nothing to end.
const RESET = Buffer.concat([query('ROLLBACK'), message('S', Buffer.alloc(0)), query('ROLLBACK')]);

export async function servePglite(db, { port, host = '127.0.0.1' }) {
  let owner = null;
  const waiting = [];
  const sockets = new Set();
  let nextId = 1;
  // Once stopped nothing runs: the database is closed next.
  let stopped = false;

  const acquire = (id) => (owner === null || owner === id ? ((owner = id), Promise.resolve()) : new Promise((resolve) => waiting.push({ id, resolve })));
  const handOn = () => {
    owner = null;
    const next = waiting.shift();
    if (next) {
      owner = next.id;
      next.resolve();
    }
  };

  const server = createServer((socket) => {
    const id = nextId++;
    let buf = Buffer.alloc(0);
    let started = false;
    let batch = [];
    // Its last batch ended with Flush: its Execute's portal and implicit transaction wait for its Sync.
    let midExchange = false;
    let chain = Promise.resolve();
    sockets.add(socket);
    socket.setNoDelay(true);

    // PGlite's own query methods (exec, query) take the mutex runExclusive holds: only the raw protocol
    // may run inside it (db.exec there waits for itself forever, and every client with it).
    const execute = (bytes) => db.runExclusive(() => db.execProtocolRaw(bytes));

    // One step after the other, each whatever the one before did: a step that failed must not leave the
    // client's later steps (its hand-on when it goes, above all) waiting forever.
    const step = (fn) => {
      chain = chain.then(() => (stopped ? undefined : fn())).catch((err) => socket.destroy(err));
    };

    const run = (bytes, flushed = false) =>
      step(async () => {
        await acquire(id);
        try {
          const out = await execute(bytes);
          midExchange = flushed;
          if (!socket.destroyed && out.length) socket.write(out);
        } finally {
          if (!midExchange && !db.isInTransaction()) handOn();
        }
      });

    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        if (!started) {
          if (buf.length < 8) return;
          const len = buf.readInt32BE(0);
          const code = buf.readInt32BE(4);
          if (code === SSL_REQUEST) {
            socket.write('N');
            buf = buf.subarray(8);
            continue;
          }
          if (buf.length < len) return;
          const msg = buf.subarray(0, len);
          buf = buf.subarray(len);
          if (code === CANCEL_REQUEST) return void socket.end();
          started = true;
          run(Buffer.from(msg));
          continue;
        }
        if (buf.length < 5) return;
        const type = String.fromCharCode(buf[0]);
        const len = 1 + buf.readInt32BE(1);
        if (buf.length < len) return;
        const msg = buf.subarray(0, len);
        buf = buf.subarray(len);
        if (type === 'X') return void socket.end();
        batch.push(msg);
        if (type === 'S' || type === 'Q' || type === 'H') {
          run(Buffer.concat(batch), type === 'H');
          batch = [];
        }
      }
    });

    // After the client's last batch ran: a client gone while it holds the session hands it on clean.
    // Messages it sent before going still run (as a backend runs what it read); an incomplete batch never.
    const done = () => {
      sockets.delete(socket);
      step(async () => {
        if (owner !== id) return;
        try {
          await execute(RESET);
        } finally {
          // Even when the reset failed: the others must still get their turn.
          handOn();
        }
      });
    };
    socket.on('close', done);
    socket.on('error', () => undefined);
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  return {
    port: server.address().port,
    // Stopping ends the connections too: a client that never leaves would keep close() waiting.
    stop: () =>
      new Promise((resolve) => {
        stopped = true;
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
}
