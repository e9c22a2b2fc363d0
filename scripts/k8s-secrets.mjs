// The credentials Secrets of a Kubernetes deployment, with fresh random values, as YAML on stdout:
// each service's own Secret (its NATS password and its DATABASE_URL with its own PostgreSQL role), the
// NATS operator's password, and per overlay what the database needs (prod: CloudNativePG basic-auth
// Secrets of the managed roles; dev: the in-cluster PostgreSQL's superuser password). The shared Secret
// (SECRETS_KEY, provider keys) is made from deploy/k8s/base/secrets.example.env.
//
//   node scripts/k8s-secrets.mjs [--dev] [--namespace NS] > secrets.yaml && kubectl apply -f secrets.yaml
// Keep secrets.yaml out of the repository (or seal it, e.g. with sealed-secrets).
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { DB_SERVICES } from './db-roles.mjs';
import { passwordVar } from './nats-config.mjs';

// Where overlays/prod/db-ca.yaml mounts CloudNativePG's CA (its Secret <cluster>-ca, key ca.crt). The
// operator's server certificate is signed by that CA, not a public one: node-postgres verifies the
// certificate and its name (`sslmode=require` included), so without the CA every connection is refused.
export const DB_CA_FILE = '/etc/sats-subscriptions/db-ca/ca.crt';

// Hex: safe inside a URL and as a NATS config token (the leading letters keep it a string).
const secret = () => `pw${randomBytes(24).toString('hex')}`;

export function k8sSecrets({ dev = false, namespace } = {}) {
  const db = dev
    ? { host: 'postgres', name: 'postgres', params: 'sslmode=disable' }
    : { host: 'sats-subscriptions-db-rw', name: 'app', params: `sslmode=verify-full&sslrootcert=${DB_CA_FILE}` };
  const meta = (name) => ({ name, ...(namespace ? { namespace } : {}), labels: { 'app.kubernetes.io/part-of': 'sats-subscriptions' } });
  const items = [];
  for (const service of DB_SERVICES) {
    const role = `sb_${service}`;
    const dbPassword = secret();
    items.push({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: meta(`sats-subscriptions-${service}`),
      type: 'Opaque',
      stringData: { NATS_PASSWORD: secret(), DATABASE_URL: `postgres://${role}:${dbPassword}@${db.host}:5432/${db.name}?${db.params}` },
    });
    if (!dev) {
      items.push({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: meta(`sats-subscriptions-db-${service}`),
        type: 'kubernetes.io/basic-auth',
        stringData: { username: role, password: dbPassword },
      });
    }
  }
  items.push({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: meta('sats-subscriptions-nats'),
    type: 'Opaque',
    stringData: { [passwordVar('operator')]: secret() },
  });
  if (dev)
    items.push({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: meta('sats-subscriptions-postgres'),
      type: 'Opaque',
      stringData: { POSTGRES_PASSWORD: secret() },
    });
  return items;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--namespace');
  const items = k8sSecrets({ dev: process.argv.includes('--dev'), namespace: i > 0 ? process.argv[i + 1] : undefined });
  // JSON is YAML: kubectl reads this list as it is.
  process.stdout.write(`${JSON.stringify({ apiVersion: 'v1', kind: 'List', items }, null, 2)}\n`);
}
