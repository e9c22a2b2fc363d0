import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export interface Mail {
  to: string[];
  from: string;
  replyTo: string;
  subject: string;
  /** The text/plain part (or the whole body of a single-part mail). */
  text: string;
  /** The text/html part, when there is one. */
  html: string | undefined;
  /** The top-level header fields by lower-case name (folded lines joined), e.g. `list-unsubscribe`. */
  headers: Record<string, string>;
}

const decode = (body: string, cte: string) => {
  // Each =XX is one byte of UTF-8 ("—" is three): read as bytes, then as UTF-8.
  if (cte === 'quoted-printable')
    return Buffer.from(
      body.replace(/=\r\n/g, '').replace(/=([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))),
      'latin1',
    ).toString('utf8');
  if (cte === 'base64') return Buffer.from(body, 'base64').toString('utf8');
  return body;
};

function splitPart(raw: string): { header: (name: string) => string; headers: Record<string, string>; body: string } {
  const at = raw.indexOf('\r\n\r\n');
  const head = raw.slice(0, at).replace(/\r\n[ \t]+/g, ' ');
  const headers = Object.fromEntries(
    head
      .split('\r\n')
      .map((l) => /^([^:\s]+):\s*(.*)$/.exec(l))
      .filter((m): m is RegExpExecArray => !!m)
      .map((m) => [m[1]!.toLowerCase(), m[2]!.trim()]),
  );
  return { header: (name) => new RegExp(`^${name}: (.*)$`, 'im').exec(head)?.[1]?.trim() ?? '', headers, body: raw.slice(at + 4) };
}

/** Just enough MIME to read what nodemailer sends: a single part, or multipart/alternative with text and HTML. */
function parseMail(raw: string, to: string[]): Mail {
  const top = splitPart(raw);
  const boundary = /boundary="?([^";]+)"?/i.exec(top.header('Content-Type'))?.[1];
  let text = '';
  let html: string | undefined;
  if (boundary) {
    for (const chunk of top.body.split(`--${boundary}`).slice(1)) {
      if (chunk.startsWith('--')) break;
      const p = splitPart(chunk.replace(/^\r\n/, ''));
      const body = decode(p.body.replace(/\r\n$/, ''), p.header('Content-Transfer-Encoding').toLowerCase()).replace(/\r\n/g, '\n');
      if (/text\/html/i.test(p.header('Content-Type'))) html = body;
      else if (/text\/plain/i.test(p.header('Content-Type'))) text = body;
    }
  } else {
    text = decode(top.body, top.header('Content-Transfer-Encoding').toLowerCase()).replace(/\r\n/g, '\n');
  }
  return { to, from: top.header('From'), replyTo: top.header('Reply-To'), subject: top.header('Subject'), text, html, headers: top.headers };
}

/** A local SMTP server (smtp-server) that takes mail with the given login and keeps what it received. */
export async function startSmtpServer(user: string, pass: string, opts: { rejectRcpt?: (address: string) => boolean; host?: string } = {}) {
  const mails: Mail[] = [];
  // While `hanging`, a connection is taken and never greeted (a mail server that hangs); `refuse` lets
  // the held ones go with a 554. `connections` counts every connection, `open` those not closed yet.
  const state = { hanging: false, connections: 0, open: 0 };
  const held: ((err?: Error) => void)[] = [];
  const counted = new Set<string>();
  const server = new SMTPServer({
    disabledCommands: ['STARTTLS'],
    disableReverseLookup: true,
    onConnect(session, cb) {
      state.connections++;
      state.open++;
      counted.add(session.id);
      if (state.hanging) held.push(cb);
      else cb();
    },
    onClose(session) {
      if (counted.delete(session.id)) state.open--;
    },
    allowInsecureAuth: true,
    onAuth(auth, _session, cb) {
      if (auth.username === user && auth.password === pass) cb(null, { user });
      else cb(new Error('Invalid username or password'));
    },
    onRcptTo(address, _session, cb) {
      if (opts.rejectRcpt?.(address.address)) {
        const err = new Error('No such user here') as Error & { responseCode: number };
        err.responseCode = 550;
        return cb(err);
      }
      cb();
    },
    onData(stream, session, cb) {
      let raw = '';
      stream.setEncoding('utf8');
      stream.on('data', (c: string) => (raw += c));
      stream.on('end', () => {
        mails.push(
          parseMail(
            raw,
            session.envelope.rcptTo.map((r) => r.address),
          ),
        );
        cb();
      });
    },
  });
  // A client that goes away mid-connection (a notifier killed by a test) resets its socket: the server
  // re-emits that as its own 'error', which with no listener ended the test run as an uncaught exception.
  server.on('error', () => undefined);
  const port = await new Promise<number>((r) => server.listen(0, opts.host ?? '127.0.0.1', () => r((server.server.address() as AddressInfo).port)));
  return {
    port,
    url: `smtp://${user}:${pass}@127.0.0.1:${port}`,
    mails,
    state,
    /** Starts hanging new connections, or stops and refuses those held. */
    hang(on: boolean) {
      state.hanging = on;
      if (!on) for (const cb of held.splice(0)) cb(new Error('Not now'));
    },
    stop: () => new Promise<void>((r) => server.close(() => r())),
  };
}
