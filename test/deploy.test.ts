import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { commonConfig } from '../libs/runtime/src/config.js';
import { railSelection } from '../services/payments/src/config.js';
import { PROVIDER_SETTINGS } from '../services/payments/src/providers/registry.js';
import { gatewayConfig } from '../services/gateway/src/config.js';
import { paymentsConfig } from '../services/payments/src/config.js';
import { canRender, K8S, render, type Doc } from './support/k8s.js';

/**
 * The Kubernetes manifests (deploy/k8s) and the Dockerfile against the code they run: each overlay is
 * rendered with `kubectl kustomize` (no cluster needed) and checked against the services' entry points,
 * ports and configuration schemas, and each service's own config loader is run on the environment the
 * overlay gives it.
 */

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SECRET = 'sats-subscriptions-secrets';

/** Every service of the system: the variable naming its HTTP port and its config loader (in dist/config.js). */
const SERVICES: Record<string, { portVar: string; loader: string }> = {
  gateway: { portVar: 'PORT', loader: 'loadGatewayConfig' },
  billing: { portVar: 'BILLING_OPS_PORT', loader: 'loadBillingConfig' },
  payments: { portVar: 'PAYMENTS_OPS_PORT', loader: 'loadPaymentsConfig' },
  nwc: { portVar: 'NWC_OPS_PORT', loader: 'loadNwcConfig' },
  notifier: { portVar: 'NOTIFIER_OPS_PORT', loader: 'loadNotifierConfig' },
};

type Container = {
  name: string;
  image: string;
  args?: string[];
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string; optional?: boolean } } }[];
  envFrom?: { configMapRef?: { name: string }; secretRef?: { name: string } }[];
  ports?: { name?: string; containerPort: number }[];
  readinessProbe?: any;
  livenessProbe?: any;
  startupProbe?: any;
  securityContext?: any;
};

if (!canRender) console.warn('deploy.test: kubectl with kustomize v4+ not found; the rendered-manifest checks are skipped');

/**
 * The variable names a service's config schema reads, from its config.ts: keys of the shape plus the
 * shared shapes it spreads. Read from source because billing, nwc and notifier do not export their
 * shapes; the first test checks this reading against the two services that do.
 */
function configNames(service: string): Set<string> {
  const src = readFileSync(join(ROOT, 'services', service, 'src/config.ts'), 'utf8');
  const names = new Set([...src.matchAll(/^\s*([A-Z][A-Z0-9_]*)\s*:/gm)].map((m) => m[1]!));
  const shared: Record<string, object> = { commonConfig, railSelection, PROVIDER_SETTINGS };
  for (const [, spread] of src.matchAll(/\.\.\.(\w+)/g)) {
    const shape = shared[spread!];
    if (!shape) throw new Error(`services/${service}/src/config.ts spreads ${spread}, which this test does not know`);
    for (const k of Object.keys(shape)) names.add(k);
  }
  return names;
}

/** Names in an env file, commented-out suggestions included (a typo there would bite whoever uncomments it). */
function envFileNames(file: string): string[] {
  return [...readFileSync(file, 'utf8').matchAll(/^#?\s*([A-Z][A-Z0-9_]*)=/gm)].map((m) => m[1]!);
}

const find = (docs: Doc[], kind: string, name: string) => docs.find((d) => d.kind === kind && d.metadata.name === name);
const workloads = (docs: Doc[]) => docs.filter((d) => d.kind === 'Deployment' || d.kind === 'StatefulSet');
const appContainer = (d: Doc): Container => d.spec.template.spec.containers[0];
const envValue = (c: Container, name: string) => c.env?.find((e) => e.name === name);

function portNumber(c: Container, port: string | number): number | undefined {
  return typeof port === 'number' ? port : c.ports?.find((p) => p.name === port)?.containerPort;
}

const secretExample = join(K8S, 'base/secrets.example.env');
const secretNames = new Set(envFileNames(secretExample));
const allKnown = new Set(Object.keys(SERVICES).flatMap((s) => [...configNames(s)]));

/** Values of the right shape for the Secret's keys, so the loaders can judge everything else. */
function fakeSecret(key: string): string {
  if (key === 'DATABASE_URL') return 'postgres://app:password@db.internal:5432/app';
  if (key === 'SECRETS_KEY') return 'ab'.repeat(32);
  if (key === 'SECRETS_KEY_PREVIOUS') return 'cd'.repeat(32);
  if (key === 'SMTP_URL') return 'smtp://user:password@mail.internal:587';
  return `test-${key.toLowerCase()}`;
}

/** The environment a service's pod gets: the ConfigMaps it loads, its own values, its Secret keys. */
function podEnv(docs: Doc[], c: Container): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of c.envFrom ?? []) {
    if (from.secretRef) throw new Error(`container ${c.name} loads the whole Secret ${from.secretRef.name}; name each key`);
    const cm = find(docs, 'ConfigMap', from.configMapRef!.name);
    if (!cm) throw new Error(`ConfigMap ${from.configMapRef!.name} is not in the rendered overlay`);
    Object.assign(env, cm.data);
  }
  for (const e of c.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.secretKeyRef) env[e.name] = fakeSecret(e.valueFrom.secretKeyRef.key);
  }
  return env;
}

it('reads config names from source the same as the exported schemas say', () => {
  expect([...configNames('gateway')].sort()).toEqual(Object.keys(gatewayConfig).sort());
  expect([...configNames('payments')].sort()).toEqual(Object.keys(paymentsConfig).sort());
});

it('lists every service of the repository', () => {
  const dirs = readdirSync(join(ROOT, 'services')).filter((d) => existsSync(join(ROOT, 'services', d, 'src/main.ts')));
  expect(Object.keys(SERVICES).sort()).toEqual(dirs.sort());
});

describe('Dockerfile', () => {
  const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
  const workspaces: string[] = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).workspaces;
  const packages = workspaces
    .flatMap((glob) => {
      const parent = glob.replace(/\/\*$/, '');
      return readdirSync(join(ROOT, parent)).map((d) => `${parent}/${d}`);
    })
    .filter((p) => existsSync(join(ROOT, p, 'package.json')));

  it('copies every workspace manifest into both stages and every build output into the runtime one', () => {
    for (const p of packages) {
      // npm ci fails (build stage) or leaves the workspace unlinked (runtime stage) when one is missing.
      expect(dockerfile.split(`COPY ${p}/package.json ${p}/`).length - 1, `${p}/package.json`).toBe(2);
      expect(dockerfile, `${p}/dist`).toContain(`COPY --from=build /app/${p}/dist ${p}/dist`);
    }
  });

  it('runs node as a non-root user with the service as argument', () => {
    expect(dockerfile).toMatch(/^FROM node:20-bookworm-slim AS build$/m);
    expect(dockerfile).toMatch(/^RUN npm ci --omit=dev/m);
    expect(dockerfile).toMatch(/^USER 1000:1000$/m);
    expect(dockerfile).toMatch(/^ENTRYPOINT \["node"\]$/m);
  });

  it('keeps build state out of the context (a stale tsbuildinfo makes tsc -b skip the build)', () => {
    const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n');
    for (const p of ['node_modules', 'dist', '*.tsbuildinfo', '.data', 'bench/results', '.git']) expect(ignored).toContain(p);
  });
});

describe('the Secret example', () => {
  it('names only variables some service reads', () => {
    const unknown = [...secretNames].filter((n) => !allKnown.has(n));
    expect(unknown).toEqual([]);
  });
});

describe.skipIf(!canRender).each(['dev', 'prod'])('overlay %s', (overlay) => {
  let docs: Doc[];
  beforeAll(() => {
    docs = render(overlay);
  });

  it.each(Object.keys(SERVICES))('runs %s with probes and a Service on the port its config names', (name) => {
    const { portVar } = SERVICES[name]!;
    const dep = find(docs, 'Deployment', name);
    expect(dep, `Deployment ${name}`).toBeDefined();
    const c = appContainer(dep!);
    expect(c.args).toEqual([`services/${name}/dist/main.js`]);
    expect(c.image).toMatch(/sats-subscriptions(:|$)/);

    // The port the process opens: the manifest's value, or the schema's default when it sets none.
    const set = envValue(c, portVar)?.value;
    const schemaDefault = readFileSync(join(ROOT, 'services', name, 'src/config.ts'), 'utf8').match(new RegExp(`${portVar}: envInt\\((\\d+)`))?.[1];
    const port = Number(set ?? schemaDefault);
    expect(port, `${portVar} of ${name}`).toBeGreaterThan(0);

    // The gateway answers outages itself (JSON 503): unready, all its replicas would leave at once. It is
    // ready once its migrations ran.
    expect(c.readinessProbe?.httpGet?.path).toBe(name === 'gateway' ? '/startedz' : '/readyz');
    expect(c.livenessProbe?.httpGet?.path).toBe('/healthz');
    for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe].filter(Boolean)) {
      expect(portNumber(c, probe.httpGet.port), `${name} probe port`).toBe(port);
    }

    const labels = dep!.spec.template.metadata.labels as Record<string, string>;
    const svc = docs.find((d) => d.kind === 'Service' && Object.entries(d.spec.selector ?? {}).every(([k, v]) => labels[k] === v) && d.spec.selector);
    expect(svc, `Service selecting ${name}`).toBeDefined();
    const targets = (svc!.spec.ports as { port: number; targetPort: string | number }[]).map((p) => portNumber(c, p.targetPort));
    expect(targets).toContain(port);
    if (name === 'gateway') expect(svc!.spec.ports[0].port).toBe(80);

    const pdb = docs.find((d) => d.kind === 'PodDisruptionBudget' && d.spec.selector.matchLabels['app.kubernetes.io/name'] === name);
    expect(pdb, `PodDisruptionBudget of ${name}`).toBeDefined();
  });

  it.each(Object.keys(SERVICES))('gives %s an environment its own config loader accepts', (name) => {
    const c = appContainer(find(docs, 'Deployment', name)!);
    const known = configNames(name);
    // Variables set for this container alone must be ones this very service reads.
    const ownUnknown = (c.env ?? []).map((e) => e.name).filter((n) => !known.has(n));
    expect(ownUnknown, `variables of ${name} that its config does not read`).toEqual([]);

    for (const e of c.env ?? []) {
      const ref = e.valueFrom?.secretKeyRef;
      if (ref?.name === `sats-subscriptions-${name}`) {
        // The service's own credentials, in its own Secret (scripts/k8s-secrets.mjs).
        expect(['DATABASE_URL', 'NATS_PASSWORD']).toContain(ref.key);
      } else if (ref) {
        expect(ref.name).toBe(SECRET);
        expect(secretNames.has(ref.key), `${ref.key} documented in secrets.example.env`).toBe(true);
      }
    }

    // The built loader, in a clean environment (nothing inherited from the test run), exits 1 with one
    // line per bad variable: enum typos, a chosen provider lacking its settings, a malformed URL.
    const env = podEnv(docs, c);
    const module = join(ROOT, 'services', name, 'dist/config.js');
    expect(existsSync(module), `${module} (run npm run build)`).toBe(true);
    const run = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', `const m = await import(process.argv[1]); m[process.argv[2]]();`, module, SERVICES[name]!.loader],
      { env: { ...env, PATH: process.env.PATH ?? '' }, encoding: 'utf8' },
    );
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
  });

  it('names in its ConfigMaps and env files only variables some service reads', () => {
    // The ConfigMaps services load as environment (NATS's and PostgreSQL's hold files).
    const loaded = new Set(workloads(docs).flatMap((w) => (appContainer(w).envFrom ?? []).map((f) => f.configMapRef?.name)));
    const names = docs.filter((d) => d.kind === 'ConfigMap' && loaded.has(d.metadata.name)).flatMap((d) => Object.keys(d.data ?? {}));
    expect(names.length).toBeGreaterThan(0);
    const files = [join(K8S, 'base/config.env'), join(K8S, 'overlays', overlay, 'config.env')].filter(existsSync);
    const unknown = [...names, ...files.flatMap(envFileNames)].filter((n) => !allKnown.has(n));
    expect(unknown).toEqual([]);
  });

  it('reads every key of the Secret example somewhere', () => {
    const read = new Set(
      docs
        .filter((d) => d.kind === 'Deployment')
        .flatMap((d) => (appContainer(d).env ?? []).filter((e) => e.valueFrom?.secretKeyRef?.name === SECRET).map((e) => e.valueFrom!.secretKeyRef!.key)),
    );
    expect([...secretNames].filter((n) => !read.has(n))).toEqual([]);
  });

  it('chooses providers once, in the ConfigMap billing and payments both load', () => {
    const billing = appContainer(find(docs, 'Deployment', 'billing')!);
    const payments = appContainer(find(docs, 'Deployment', 'payments')!);
    const maps = (c: Container) => (c.envFrom ?? []).map((f) => f.configMapRef?.name);
    expect(maps(billing)).toEqual(maps(payments));
    for (const d of docs.filter((d) => d.kind === 'Deployment')) {
      const own = (appContainer(d).env ?? []).map((e) => e.name).filter((n) => n in railSelection);
      expect(own, `${d.metadata.name} sets a provider of its own`).toEqual([]);
    }
  });

  it('runs every pod as non-root, every service on a read-only root filesystem', () => {
    const all = workloads(docs);
    expect(all.length).toBeGreaterThan(Object.keys(SERVICES).length);
    for (const w of all) {
      const pod = w.spec.template.spec;
      for (const c of [...(pod.initContainers ?? []), ...pod.containers] as Container[]) {
        const sc = { ...pod.securityContext, ...c.securityContext };
        expect(sc.runAsNonRoot, `${w.metadata.name}/${c.name} runAsNonRoot`).toBe(true);
        expect(sc.runAsUser ?? 1, `${w.metadata.name}/${c.name} runAsUser`).not.toBe(0);
        expect(sc.allowPrivilegeEscalation, `${w.metadata.name}/${c.name} allowPrivilegeEscalation`).toBe(false);
        if (w.metadata.name in SERVICES) expect(sc.readOnlyRootFilesystem, `${w.metadata.name} readOnlyRootFilesystem`).toBe(true);
      }
    }
  });

  it('runs NATS with JetStream on a persistent volume, where NATS_URL points', () => {
    const nats = find(docs, 'StatefulSet', 'nats');
    expect(nats).toBeDefined();
    const c = appContainer(nats!);
    expect(c.image).toMatch(/^nats:2\.10\.\d+-alpine@sha256:[0-9a-f]{64}$/);
    expect(c.args).toEqual(['--config', '/etc/nats/nats.conf']);
    const conf = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name.startsWith('nats-config'))!.data!['nats.conf']!;
    expect(conf).toMatch(/jetstream \{\s*store_dir: \/data/);
    expect((c as any).volumeMounts).toContainEqual(expect.objectContaining({ mountPath: '/data', name: 'data' }));
    expect(nats!.spec.volumeClaimTemplates.map((v: Doc) => v.metadata.name)).toContain('data');

    const url = new URL(docs.find((d) => d.kind === 'ConfigMap' && d.data?.NATS_URL)!.data!.NATS_URL!);
    const svc = find(docs, 'Service', url.hostname);
    expect(svc?.spec.selector).toEqual(nats!.spec.selector.matchLabels);
    expect(svc!.spec.ports.map((p: { port: number }) => p.port)).toContain(Number(url.port));
  });
});

describe.skipIf(!canRender)('overlay dev', () => {
  it('runs PostgreSQL 16 in the cluster behind a Service', () => {
    const docs = render('dev');
    const pg = find(docs, 'StatefulSet', 'postgres');
    expect(appContainer(pg!).image).toBe('postgres:16');
    expect(find(docs, 'Service', 'postgres')?.spec.selector).toEqual(pg!.spec.selector.matchLabels);
    expect(pg!.spec.volumeClaimTemplates).toHaveLength(1);
  });
});

describe.skipIf(!canRender)('overlay prod', () => {
  it('never sets DEV_MODE and runs no PostgreSQL of its own', () => {
    const docs = render('prod');
    for (const d of docs.filter((d) => d.kind === 'ConfigMap')) expect(Object.keys(d.data ?? {})).not.toContain('DEV_MODE');
    for (const w of workloads(docs)) {
      for (const c of w.spec.template.spec.containers as Container[]) {
        expect(envValue(c, 'DEV_MODE'), `${w.metadata.name} DEV_MODE`).toBeUndefined();
        expect(c.image, `${w.metadata.name} image`).not.toMatch(/postgres/);
      }
    }
    expect(docs.filter((d) => d.kind === 'Service' && /postgres/.test(d.metadata.name))).toEqual([]);
  });

  it('runs two or more replicas of every service, the gateway scaled by an autoscaler', () => {
    const docs = render('prod');
    for (const name of Object.keys(SERVICES)) {
      const dep = find(docs, 'Deployment', name)!;
      const hpa = docs.find((d) => d.kind === 'HorizontalPodAutoscaler' && d.spec.scaleTargetRef.name === name);
      if (name === 'gateway') {
        expect(hpa?.spec.minReplicas).toBeGreaterThanOrEqual(2);
        // A fixed count next to an autoscaler would be reset by every apply.
        expect(dep.spec.replicas).toBeUndefined();
      } else {
        expect(dep.spec.replicas, `${name} replicas`).toBeGreaterThanOrEqual(2);
      }
    }
  });
});
