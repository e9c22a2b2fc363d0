// Serves one embedded PGlite database to several clients over the PostgreSQL wire protocol.
// PGlite has a single session, so clients take turns: a client's messages run together up to each Sync
// (extended protocol) or Query (simple protocol), and a client that leaves the session inside a
// transaction keeps it until that transaction ends. Without this, one client's Parse/Bind could land
// between another's ("unnamed prepared statement does not exist") or inside its transaction.
import { createServer } from 'node:net';

const SSL_REQUEST = 80877103;
const CANCEL_REQUEST = 80877102;

export async function servePglite(db, { port, host = '127.0.0.1' }) {
  let owner = null;
  const waiting = [];
  let nextId = 1;

  const acquire = (id) => (owner === null || owner === id ? ((owner = id), Promise.resolve()) : new Promise((resolve) => waiting.push({ id, resolve })));
  const release = (id) => {
    if (owner !== id || db.isInTransaction()) return;
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
    let chain = Promise.resolve();
    socket.setNoDelay(true);

    const run = (message) => {
      chain = chain.then(async () => {
        await acquire(id);
        try {
          const out = await db.runExclusive(() => db.execProtocolRaw(message));
          if (!socket.destroyed && out.length) socket.write(out);
        } catch (err) {
          socket.destroy(err);
        } finally {
          release(id);
        }
      });
    };

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
          run(Buffer.concat(batch));
          batch = [];
        }
      }
    });

    const done = () => {
      chain = chain.then(async () => {
        // A client gone mid-transaction must not leave the shared session inside it.
        if (owner !== id) return;
        if (db.isInTransaction()) await db.runExclusive(() => db.exec('ROLLBACK')).catch(() => undefined);
        release(id);
      });
    };
    socket.on('close', done);
    socket.on('error', () => undefined);
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  return { port: server.address().port, stop: () => new Promise((r) => server.close(() => r())) };
}
