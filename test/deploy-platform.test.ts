import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as models from 'kubernetes-models';
import { beforeAll, describe, expect, it } from 'vitest';
import { BUS_SERVICES, routes } from '@sb/contracts';
import { natsAuthConfig } from '../scripts/nats-config.mjs';
import { DB_SERVICES } from '../scripts/db-roles.mjs';
import { k8sSecrets } from '../scripts/k8s-secrets.mjs';
import { canRender, K8S, render, type Doc } from './support/k8s.js';

/**
 * What a platform team checks before adopting the manifests: every object valid against the Kubernetes
 * schemas, the NATS permissions current with the contracts, every Secret key a pod reads provided, and
 * the NetworkPolicies letting through exactly the connections the services make.
 */

const SERVICES = ['gateway', 'billing', 'payments', 'nwc', 'notifier'] as const;
const INTERNET = ['payments', 'nwc', 'notifier'];

it('generates the NATS users of base (production) and of the dev overlay from the contracts', () => {
  expect(readFileSync(join(K8S, 'base/nats/auth.conf'), 'utf8')).toBe(natsAuthConfig({ devMode: false }));
  expect(readFileSync(join(K8S, 'overlays/dev/nats/auth.conf'), 'utf8')).toBe(natsAuthConfig({ devMode: true }));
  // Every service that talks on the bus or to the database is deployed as one.
  expect([...BUS_SERVICES].sort()).toEqual([...SERVICES].sort());
  expect([...DB_SERVICES].sort()).toEqual([...SERVICES].sort());
});

it("lets the ingress wait longer than the longest route and the pages' own wait for it (review finding: 60 s, cut the 75 s routes)", () => {
  const ingress = readFileSync(join(K8S, 'overlays/prod/ingress.yaml'), 'utf8');
  const seconds = Number(/proxy-read-timeout: "(\d+)"/.exec(ingress)?.[1]);
  const longest = Math.max(...routes.map((r) => ('busTimeoutMs' in r ? (r.busTimeoutMs ?? 0) : 0)));
  expect(longest).toBe(75_000);
  // The checkout and portal pages wait 90 s for those routes (web/src: waitMs).
  expect(seconds * 1000).toBeGreaterThan(Math.max(longest, 90_000));
});

/** The model class of an object's apiVersion and kind in kubernetes-models (core `v1` included). */
function modelOf(d: Doc): (new (data: unknown) => { validate(): void }) | undefined {
  const [group, version] = d.apiVersion.includes('/') ? d.apiVersion.split('/') : ['', d.apiVersion];
  const key = group ? group.replace(/\.([a-z])/g, (_, c: string) => c.toUpperCase()) : version!;
  const ns = (models as Record<string, any>)[key];
  return (group ? ns?.[version!] : ns)?.[d.kind];
}

// ---- NetworkPolicy evaluation: who may open a connection to whom ----
interface Peer {
  name: string;
  namespace: string;
  labels: Record<string, string>;
  ip?: string;
  ports?: { name?: string; containerPort: number }[];
}
type Selector = { matchLabels?: Record<string, string>; matchExpressions?: { key: string; operator: string; values?: string[] }[] } | undefined;
const NS = 'sats';

function matches(sel: Selector, labels: Record<string, string>): boolean {
  if (!sel) return true;
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const has = e.key in labels;
    if (e.operator === 'In' && !(has && e.values!.includes(labels[e.key]!))) return false;
    if (e.operator === 'NotIn' && has && e.values!.includes(labels[e.key]!)) return false;
    if (e.operator === 'Exists' && !has) return false;
    if (e.operator === 'DoesNotExist' && has) return false;
  }
  return true;
}

const ipNum = (ip: string) => ip.split('.').reduce((n, o) => n * 256 + Number(o), 0);
function inCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split('/');
  const size = 2 ** (32 - Number(bits));
  return Math.floor(ipNum(ip) / size) === Math.floor(ipNum(base!) / size);
}

function peerMatches(peer: any, other: Peer): boolean {
  if (peer.ipBlock) return !!other.ip && inCidr(other.ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((c: string) => inCidr(other.ip!, c));
  if (other.ip) return false;
  const nsOk = peer.namespaceSelector ? matches(peer.namespaceSelector, { 'kubernetes.io/metadata.name': other.namespace }) : other.namespace === NS;
  return nsOk && matches(peer.podSelector, other.labels);
}

function portMatches(ports: any[] | undefined, target: Peer, port: number, protocol: string): boolean {
  if (!ports?.length) return true;
  return ports.some(
    (p) =>
      (p.protocol ?? 'TCP') === protocol &&
      (p.port === undefined || p.port === port || (typeof p.port === 'string' && target.ports?.some((c) => c.name === p.port && c.containerPort === port))),
  );
}

function allowed(policies: Doc[], src: Peer, dst: Peer, port: number, protocol = 'TCP'): boolean {
  const side = (pod: Peer, type: 'Egress' | 'Ingress') =>
    policies.filter((p) => pod.namespace === NS && !pod.ip && matches(p.spec.podSelector, pod.labels) && p.spec.policyTypes.includes(type));
  const egress = side(src, 'Egress');
  const egressOk =
    egress.length === 0 ||
    egress.some((p) =>
      (p.spec.egress ?? []).some((r: any) => (!r.to || r.to.some((t: any) => peerMatches(t, dst))) && portMatches(r.ports, dst, port, protocol)),
    );
  const ingress = side(dst, 'Ingress');
  const ingressOk =
    ingress.length === 0 ||
    ingress.some((p) =>
      (p.spec.ingress ?? []).some((r: any) => (!r.from || r.from.some((f: any) => peerMatches(f, src))) && portMatches(r.ports, dst, port, protocol)),
    );
  return egressOk && ingressOk;
}

describe.skipIf(!canRender).each(['dev', 'prod'])('overlay %s', (overlay) => {
  let docs: Doc[];
  let pods: Map<string, Peer>;
  let policies: Doc[];
  beforeAll(() => {
    docs = render(overlay);
    policies = docs.filter((d) => d.kind === 'NetworkPolicy');
    pods = new Map();
    for (const w of docs.filter((d) => d.kind === 'Deployment' || d.kind === 'StatefulSet')) {
      pods.set(w.metadata.name, {
        name: w.metadata.name,
        namespace: NS,
        labels: w.spec.template.metadata.labels,
        ports: w.spec.template.spec.containers.flatMap((c: any) => c.ports ?? []),
      });
    }
    // CloudNativePG's instances: labels from the operator plus the Cluster's inheritedMetadata.
    for (const c of docs.filter((d) => d.kind === 'Cluster')) {
      pods.set(`${c.metadata.name}-rw`, {
        name: c.metadata.name,
        namespace: NS,
        labels: { 'cnpg.io/cluster': c.metadata.name, ...c.spec.inheritedMetadata?.labels },
        ports: [{ name: 'postgresql', containerPort: 5432 }],
      });
    }
    pods.set('ingress', { name: 'ingress-nginx-controller', namespace: 'ingress-nginx', labels: { 'app.kubernetes.io/name': 'ingress-nginx' } });
    pods.set('prometheus', { name: 'prometheus', namespace: 'monitoring', labels: { 'app.kubernetes.io/name': 'prometheus' } });
    pods.set('dns', { name: 'coredns', namespace: 'kube-system', labels: { 'k8s-app': 'kube-dns' } });
    pods.set('cnpg-operator', { name: 'cnpg-controller-manager', namespace: 'cnpg-system', labels: { 'app.kubernetes.io/name': 'cloudnative-pg' } });
    pods.set('public', { name: 'a payment provider', namespace: '', labels: {}, ip: '93.184.216.34' });
    pods.set('private', { name: 'a private address', namespace: '', labels: {}, ip: '10.1.2.3' });
    pods.set('metadata', { name: 'the cloud metadata service', namespace: '', labels: {}, ip: '169.254.169.254' });
  });
  const pod = (name: string) => {
    const p = pods.get(name);
    if (!p) throw new Error(`no pod ${name}`);
    return p;
  };

  it('validates every object against the Kubernetes schemas (kubernetes-models)', () => {
    expect(docs.length).toBeGreaterThan(20);
    const problems: string[] = [];
    for (const d of docs) {
      if (d.apiVersion === 'postgresql.cnpg.io/v1') continue; // a CRD: checked in the prod test below
      const Model = modelOf(d);
      if (!Model) {
        problems.push(`${d.apiVersion} ${d.kind} ${d.metadata.name}: no schema`);
        continue;
      }
      try {
        new Model(d).validate();
      } catch (err) {
        problems.push(`${d.kind} ${d.metadata.name}: ${(err as Error).message}`);
      }
    }
    expect(problems).toEqual([]);
  });

  it('the validation finds a broken object (so the check above can fail)', () => {
    const dep = structuredClone(docs.find((d) => d.kind === 'Deployment')!);
    dep.spec.template.spec.containers[0].ports[0].containerPort = 'http';
    expect(() => new (modelOf(dep)!)(dep).validate()).toThrow(/containerPort/);
  });

  it.each(SERVICES)('gives %s a ServiceAccount of its own without a token, spread over nodes, time to finish its work', (name) => {
    const spec = docs.find((d) => d.kind === 'Deployment' && d.metadata.name === name)!.spec.template.spec;
    expect(spec.serviceAccountName).toBe(name);
    const sa = docs.find((d) => d.kind === 'ServiceAccount' && d.metadata.name === name) as any;
    expect(sa?.automountServiceAccountToken).toBe(false);
    expect(spec.automountServiceAccountToken).toBe(false);
    const spread = spec.topologySpreadConstraints.find((t: any) => t.topologyKey === 'kubernetes.io/hostname');
    expect(spread.matchLabelKeys).toEqual(['app.kubernetes.io/name']);
    // The longest route's work (75 s: the NWC checkout, the portal's wallet connect) finishes after the
    // preStop pause, with room for the drain (found in review: 75 s in all, a connect in flight was cut).
    const preStop = Number(spec.containers[0].lifecycle.preStop.exec.command[1]);
    const longest = Math.max(...routes.map((r) => ('busTimeoutMs' in r ? (r.busTimeoutMs ?? 0) : 0))) / 1000;
    expect(spec.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(preStop + longest + 10);
  });

  it('provides every Secret key a pod reads: the service Secrets from scripts/k8s-secrets.mjs, the shared one from its example', () => {
    const made = new Map(k8sSecrets({ dev: overlay === 'dev' }).map((s) => [s.metadata.name, new Set(Object.keys(s.stringData))]));
    const example = new Set([...readFileSync(join(K8S, 'base/secrets.example.env'), 'utf8').matchAll(/^#?\s*([A-Z][A-Z0-9_]*)=/gm)].map((m) => m[1]!));
    for (const w of docs.filter((d) => d.kind === 'Deployment' || d.kind === 'StatefulSet')) {
      for (const c of w.spec.template.spec.containers) {
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef;
          if (!ref || ref.optional) continue;
          const keys = ref.name === 'sats-subscriptions-secrets' ? example : made.get(ref.name);
          expect(keys?.has(ref.key), `${w.metadata.name} reads ${ref.name}/${ref.key}`).toBe(true);
        }
      }
    }
    // Each service's DATABASE_URL names its own role and a Service of this overlay (or CloudNativePG's).
    for (const s of k8sSecrets({ dev: overlay === 'dev' }).filter((s) => s.stringData.DATABASE_URL)) {
      const url = new URL(s.stringData.DATABASE_URL!);
      expect(url.username).toBe(`sb_${s.metadata.name.replace('sats-subscriptions-', '')}`);
      expect(pods.has(url.hostname) || docs.some((d) => d.kind === 'Service' && d.metadata.name === url.hostname)).toBe(true);
    }
  });

  it("lets through the services' real connections: NATS, PostgreSQL, DNS, the ingress to the gateway, metrics", () => {
    const natsPort = Number(new URL(docs.find((d) => d.kind === 'ConfigMap' && d.data?.NATS_URL)!.data!.NATS_URL!).port);
    const db = overlay === 'dev' ? pod('postgres') : pod('sats-subscriptions-db-rw');
    const dbPort = Number(new URL(k8sSecrets({ dev: overlay === 'dev' })[0]!.stringData.DATABASE_URL!).port);
    for (const s of SERVICES) {
      expect(allowed(policies, pod(s), pod('nats'), natsPort), `${s} -> NATS`).toBe(true);
      expect(allowed(policies, pod(s), db, dbPort), `${s} -> PostgreSQL`).toBe(true);
      expect(allowed(policies, pod(s), pod('dns'), 53, 'UDP'), `${s} -> DNS`).toBe(true);
      const metricsPort = Number(docs.find((d) => d.kind === 'Deployment' && d.metadata.name === s)!.spec.template.metadata.annotations['prometheus.io/port']);
      expect(allowed(policies, pod('prometheus'), pod(s), metricsPort), `prometheus -> ${s}`).toBe(true);
    }
    expect(allowed(policies, pod('ingress'), pod('gateway'), 8080)).toBe(true);
    expect(allowed(policies, pod('nats'), pod('nats'), 6222)).toBe(true);
    if (overlay === 'prod') {
      expect(allowed(policies, pod('cnpg-operator'), db, 8000)).toBe(true);
      expect(allowed(policies, db, db, 5432)).toBe(true);
    }
  });

  it('blocks everything else: no other way in, no lateral moves, the internet only for payments, nwc and the notifier', () => {
    const db = overlay === 'dev' ? pod('postgres') : pod('sats-subscriptions-db-rw');
    for (const s of SERVICES.filter((s) => s !== 'gateway')) {
      const port = pod(s).ports![0]!.containerPort;
      expect(allowed(policies, pod('ingress'), pod(s), port), `ingress -> ${s}`).toBe(false);
      expect(allowed(policies, pod('gateway'), pod(s), port), `gateway -> ${s}`).toBe(false);
    }
    expect(allowed(policies, pod('billing'), pod('gateway'), 8080)).toBe(false);
    expect(allowed(policies, pod('ingress'), pod('nats'), 4222)).toBe(false);
    expect(allowed(policies, pod('ingress'), db, 5432)).toBe(false);
    expect(allowed(policies, pod('billing'), pod('nats'), 6222)).toBe(false);
    expect(allowed(policies, pod('nats'), db, 5432)).toBe(false);
    for (const s of SERVICES) {
      expect(allowed(policies, pod(s), pod('public'), 443), `${s} -> internet`).toBe(INTERNET.includes(s));
      expect(allowed(policies, pod(s), pod('private'), 443), `${s} -> private address`).toBe(false);
      expect(allowed(policies, pod(s), pod('metadata'), 80), `${s} -> metadata service`).toBe(false);
    }
    expect(allowed(policies, pod('nats'), pod('public'), 443)).toBe(false);
  });

  it('pins every container image by tag and digest', () => {
    for (const w of docs.filter((d) => d.kind === 'Deployment' || d.kind === 'StatefulSet')) {
      for (const c of w.spec.template.spec.containers) {
        if (overlay === 'dev' && w.metadata.name !== 'nats') continue; // dev: locally built image, development PostgreSQL
        expect(c.image, `${w.metadata.name}/${c.name}`).toMatch(/^[^@\s]+:[\w.-]+@sha256:[0-9a-f]{64}$/);
      }
    }
  });
});

describe.skipIf(!canRender)('overlay prod', () => {
  it("verifies the database's certificate with CloudNativePG's CA, mounted where each DATABASE_URL names it", () => {
    const docs = render('prod');
    const cluster = docs.find((d) => d.apiVersion === 'postgresql.cnpg.io/v1' && d.kind === 'Cluster')!;
    const secrets = new Map(k8sSecrets().map((s) => [s.metadata.name, s]));
    const deployments = docs.filter((d) => d.kind === 'Deployment');
    expect(deployments.map((d) => d.metadata.name).sort()).toEqual([...SERVICES].sort());
    for (const w of deployments) {
      const c = w.spec.template.spec.containers[0];
      const ref = c.env.find((e: any) => e.name === 'DATABASE_URL').valueFrom.secretKeyRef;
      const url = new URL(secrets.get(ref.name)!.stringData.DATABASE_URL!);
      // node-postgres: require and verify-full both check the certificate; the CA makes it pass.
      expect(url.searchParams.get('sslmode'), w.metadata.name).toBe('verify-full');
      const caFile = url.searchParams.get('sslrootcert')!;
      const mount = c.volumeMounts.find((m: any) => caFile.startsWith(`${m.mountPath}/`));
      expect(mount, `${w.metadata.name} mounts ${caFile}`).toBeTruthy();
      const volume = w.spec.template.spec.volumes.find((v: any) => v.name === mount.name);
      // The operator's CA Secret, its certificate only (never ca.key) at the file's name.
      expect(volume.secret.secretName).toBe(`${cluster.metadata.name}-ca`);
      expect(volume.secret.items).toEqual([{ key: 'ca.crt', path: caFile.slice(mount.mountPath.length + 1) }]);
    }
  });

  it('runs PostgreSQL by CloudNativePG: three instances, one role per service owning its schema, each from its Secret', () => {
    const docs = render('prod');
    const cluster = docs.find((d) => d.apiVersion === 'postgresql.cnpg.io/v1' && d.kind === 'Cluster')!;
    expect(cluster.spec.instances).toBe(3);
    expect(cluster.spec.storage.size).toMatch(/^\d+Gi$/);
    const roles = cluster.spec.managed.roles as { name: string; ensure: string; login: boolean; passwordSecret: { name: string } }[];
    const secrets = new Map(k8sSecrets().map((s) => [s.metadata.name, s]));
    expect(roles.map((r) => r.name).sort()).toEqual(SERVICES.map((s) => `sb_${s}`).sort());
    for (const s of SERVICES) {
      const role = roles.find((r) => r.name === `sb_${s}`)!;
      expect(role).toMatchObject({ ensure: 'present', login: true });
      const basic = secrets.get(role.passwordSecret.name)!;
      expect(basic.type).toBe('kubernetes.io/basic-auth');
      expect(basic.stringData.username).toBe(`sb_${s}`);
      expect(cluster.spec.bootstrap.initdb.postInitApplicationSQL).toContain(`CREATE SCHEMA ${s} AUTHORIZATION sb_${s}`);
    }
    const ingress = docs.find((d) => d.kind === 'Ingress')!;
    expect(ingress.spec.rules[0].http.paths[0].backend.service).toEqual({ name: 'gateway', port: { name: 'http' } });
    // The API and the pages, not the gateway's /metrics, /healthz and /readyz (found from outside: public).
    expect(ingress.spec.rules[0].http.paths.map((p: { path: string }) => p.path)).toEqual(['/subscriptions_manager']);
    expect(ingress.spec.tls[0].secretName).toBeTruthy();
    const nats = docs.find((d) => d.kind === 'StatefulSet' && d.metadata.name === 'nats')!;
    expect(nats.spec.replicas).toBe(3);
    expect(docs.find((d) => d.kind === 'ConfigMap' && d.data?.NATS_REPLICAS)?.data?.NATS_REPLICAS).toBe('3');
    const env = Object.fromEntries(nats.spec.template.spec.containers[0].env.map((e: any) => [e.name, e.value]));
    expect(env.GOMEMLIMIT).toMatch(/MiB$/);
    expect(docs.find((d) => d.kind === 'PodDisruptionBudget' && d.metadata.name === 'nats')?.spec.maxUnavailable).toBe(1);
  });
});
