import { createDb, type Db } from '@sb/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { k8sSecrets } from '../scripts/k8s-secrets.mjs';
import { startPgCluster, type PgCluster } from './support/pg-cluster.js';

/**
 * Found from outside: every service of the prod overlay would end at start with "self-signed certificate"
 * (a crash loop), since node-postgres verifies the server's certificate for `sslmode=require` too and
 * CloudNativePG signs it with a CA of its own. A private PostgreSQL with TLS and its own CA stands in for
 * the operator's; each service's DATABASE_URL as `scripts/k8s-secrets.mjs` writes it for prod (only the
 * address, the login and the CA file's place changed: deploy-platform.test.ts checks the prod overlay
 * mounts the CA where the URL names it) must connect over TLS, as the services' own pool does.
 */
let cluster: PgCluster;
const dbs: Db[] = [];

beforeAll(async () => {
  cluster = await startPgCluster({ tls: true });
}, 120_000);
afterAll(async () => {
  await Promise.all(dbs.map((d) => d.close()));
  await cluster?.destroy();
});

/** A prod DATABASE_URL pointed at the private server, its TLS parameters as written. */
function local(prodUrl: string): string {
  const url = new URL(prodUrl);
  url.hostname = 'localhost';
  url.port = String(cluster.port);
  url.username = 'postgres';
  url.password = '';
  url.pathname = '/postgres';
  // The CA file at this machine's place instead of the pod's, only where the URL names one.
  if (url.searchParams.has('sslrootcert')) url.searchParams.set('sslrootcert', cluster.caFile!);
  return url.toString();
}

describe('prod DATABASE_URL against a database whose certificate its own CA signed', () => {
  it('connects over TLS with every service URL', async () => {
    const urls = k8sSecrets()
      .map((s) => s.stringData.DATABASE_URL)
      .filter((u): u is string => !!u);
    expect(urls).toHaveLength(5);
    for (const u of urls) {
      const db = createDb(local(u), { max: 1 });
      dbs.push(db);
      const r = await db.query<{ ssl: boolean }>('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
      expect(r.rows[0]?.ssl).toBe(true);
    }
  });

  it('refuses the server under a name its certificate was not issued to (verify-full: not only the CA)', async () => {
    const other = new URL(local(k8sSecrets()[0]!.stringData.DATABASE_URL!));
    other.hostname = '127.0.0.1';
    const db = createDb(other.toString(), { max: 1 });
    dbs.push(db);
    await expect(db.query('SELECT 1')).rejects.toThrow(/certificate|altnames|IP/i);
  });
});
