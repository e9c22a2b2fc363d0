import { createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendEmail } from '../src/channels/email.js';

/**
 * A mail server that greets, then answers EHLO with continuation lines for ever, each well inside the
 * socket timeout: no single wait times out, so only a deadline on the whole send ends it.
 */
let server: ReturnType<typeof createServer>;
let port: number;
const sockets: { socket: Socket; closed: boolean }[] = [];

beforeAll(async () => {
  server = createServer((socket) => {
    const c = { socket, closed: false };
    sockets.push(c);
    socket.on('close', () => (c.closed = true));
    socket.on('error', () => undefined);
    socket.write('220 slow.example ESMTP\r\n');
    socket.on('data', (chunk) => {
      if (!/^EHLO/i.test(chunk.toString())) return;
      const timer = setInterval(() => socket.writable && socket.write('250-still thinking\r\n'), 200);
      socket.on('close', () => clearInterval(timer));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  for (const c of sockets) c.socket.destroy();
  await new Promise<void>((r) => server.close(() => r()));
});

describe('an e-mail has a deadline as a whole (review finding: a send outlived its claim and was sent again)', () => {
  it('a server that answers every step slowly for ever: the send fails at the deadline and its connection is closed', async () => {
    const sent = sendEmail(
      `smtp://127.0.0.1:${port}`,
      { from: 'Shop <shop@example.com>' },
      'someone@example.com',
      { subject: 'Hello', text: 'Hello', html: '<p>Hello</p>' },
      undefined,
      undefined,
      1_500,
    );
    const outcome = await sent;
    expect(outcome).toEqual({ delivered: false, error: 'the mail server did not take the message within 1.5 seconds', permanent: false });
    await expect.poll(() => sockets.length === 1 && sockets[0]!.closed).toBe(true);
  });
});
