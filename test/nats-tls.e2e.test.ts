import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectNats } from '@sb/runtime';
import { startNats } from '../scripts/stack.mjs';
import { passwordVar } from '../scripts/nats-config.mjs';

/** A CA and a server certificate for 127.0.0.1, made with openssl for this test only. */
function makeCertificates(dir: string): { ca: string; cert: string; key: string } {
  const f = (n: string) => join(dir, n);
  const run = (...args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.pem'), '-days', '1', '-subj', '/CN=test-ca');
  run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=127.0.0.1');
  execFileSync('sh', ['-c', `printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > ${f('ext.cnf')}`]);
  run(
    'x509',
    '-req',
    '-in',
    f('server.csr'),
    '-CA',
    f('ca.pem'),
    '-CAkey',
    f('ca.key'),
    '-CAcreateserial',
    '-out',
    f('server.pem'),
    '-days',
    '1',
    '-extfile',
    f('ext.cnf'),
  );
  return { ca: f('ca.pem'), cert: f('server.pem'), key: f('server.key') };
}

describe('TLS to NATS (optional)', () => {
  let dir: string;
  let nats: Awaited<ReturnType<typeof startNats>>;
  let ca: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sb-nats-tls-'));
    const certs = makeCertificates(dir);
    ca = certs.ca;
    nats = await startNats(join(dir, 'store'), { secure: true, tls: { certFile: certs.cert, keyFile: certs.key } });
  });
  afterAll(async () => {
    await nats?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('connects a service over TLS with NATS_TLS_CA_FILE, and is refused without the CA', async () => {
    const settings = { NATS_URL: nats.url, NATS_USER: 'billing', NATS_PASSWORD: nats.env[passwordVar('billing')]! };
    expect(nats.url).toMatch(/^tls:\/\//);
    const nc = await connectNats({ ...settings, NATS_TLS_CA_FILE: ca }, 'tls-test');
    try {
      expect(nc.info?.tls_required).toBe(true);
      expect(await nc.rtt()).toBeGreaterThanOrEqual(0);
    } finally {
      await nc.close();
    }
    // The server's certificate is signed by a CA the system does not trust.
    await expect(connectNats({ ...settings, NATS_URL: nats.url }, 'no-ca').then((c) => c.close())).rejects.toThrow();
  });
});
