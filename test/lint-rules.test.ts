import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// The layer rules of biome.json, run by the real linter on probe files in a scratch copy of the layout.
const ROOT = join(import.meta.dirname, '..');
const BIOME = join(ROOT, 'node_modules', '.bin', 'biome');
const scratch = mkdtempSync(join(tmpdir(), 'sb-lint-'));
const config = JSON.parse(readFileSync(join(ROOT, 'biome.json'), 'utf8'));
config.$schema = undefined;
config.vcs = { enabled: false };
writeFileSync(join(scratch, 'biome.json'), JSON.stringify(config));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function lint(path: string, source: string): { code: number; out: string } {
  const file = join(scratch, path);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, source);
  const r = spawnSync(BIOME, ['lint', '--config-path', scratch, '--colors=off', file], { cwd: scratch, encoding: 'utf8' });
  return { code: r.status ?? -1, out: `${r.stdout}${r.stderr}` };
}

describe('layer import rules (biome.json)', () => {
  it('lets domain/ import contracts and its own siblings', () => {
    const r = lint(
      'services/billing/src/domain/ok.ts',
      "import { z } from '@sb/contracts';\nimport { LIVE } from './lifecycle.js';\nexport const x = [z, LIVE];\n",
    );
    expect(r.out).not.toContain('noRestrictedImports');
    expect(r.code).toBe(0);
  });

  it.each([
    ["import { PlansRepo } from '../store/plans.repo.js';", 'imports no store'],
    ["import pg from 'pg';", 'the database is reached from store/'],
    ["import { allHandlers } from '../handlers/index.js';", 'imports no handlers'],
    ["import { requestPayment } from '../payments-client.js';", 'service wiring or I/O'],
  ])('refuses in domain/: %s', (line, message) => {
    const r = lint('services/billing/src/domain/bad.ts', `${line}\nexport const x = [${line.match(/import (?:\{ )?(\w+)/)?.[1]}];\n`);
    expect(r.code).not.toBe(0);
    expect(r.out).toContain(message);
  });

  it('refuses service code in libs/runtime and runtime in contracts', () => {
    const a = lint('libs/runtime/src/bad.ts', "import { Scheduler } from '../../../services/billing/src/scheduler.js';\nexport const x = Scheduler;\n");
    expect(a.code).not.toBe(0);
    expect(a.out).toContain('imports no service code');
    const b = lint('libs/contracts/src/bad.ts', "import { newId } from '@sb/runtime';\nexport const x = newId;\n");
    expect(b.code).not.toBe(0);
    expect(b.out).toContain('import no runtime');
  });

  it('refuses one service importing another service’s source', () => {
    const r = lint('services/nwc/src/bad.ts', "import { Scheduler } from '../../billing/src/scheduler.js';\nexport const x = Scheduler;\n");
    expect(r.code).not.toBe(0);
    expect(r.out).toContain('over the bus');
  });
});
