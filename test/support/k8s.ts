import { execFileSync, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

export const K8S = join(dirname(fileURLToPath(import.meta.url)), '../../deploy/k8s');

export type Doc = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: any;
  data?: Record<string, string>;
};

/**
 * Rendering needs kubectl with a kustomize of v4 or later (`labels`, targeted `patches`). Where there is
 * none (CI installs only npm and Debian packages, whose kubectl 1.20 is too old), the rendered checks are
 * skipped, visibly, and the checks of files alone still run.
 */
const kustomizeVersion = (() => {
  const r = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' });
  return /Kustomize Version: v(\d+)/.exec(r.stdout ?? '')?.[1];
})();
export const canRender = kustomizeVersion !== undefined && Number(kustomizeVersion) >= 4;

export function render(overlay: string): Doc[] {
  let out: string;
  try {
    out = execFileSync('kubectl', ['kustomize', join(K8S, 'overlays', overlay)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err: any) {
    if (err.code === 'ENOENT') {
      throw new Error('kubectl is not on the PATH: these tests render the manifests with `kubectl kustomize`; install kubectl (v1.27 or later)');
    }
    throw new Error(`kubectl kustomize overlays/${overlay} failed:\n${err.stderr ?? err.message}`);
  }
  return YAML.parseAllDocuments(out)
    .map((d) => d.toJS() as Doc)
    .filter(Boolean);
}
