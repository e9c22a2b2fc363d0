import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

// Rules of the codebase's layout that a reviewer should not have to check by eye (CONTRIBUTING.md).
const ROOT = join(import.meta.dirname, '..');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'dist' || e.name === 'node_modules' ? [] : sources(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}
const serviceFiles = readdirSync(join(ROOT, 'services')).flatMap((s) => sources(join(ROOT, 'services', s, 'src')));
const rel = (p: string) => relative(ROOT, p);

/** A statement handed to a driver: `.query(` (typed or not) whose text starts with SQL. */
const SQL_CALL = /\.query\s*(<[^()]*>)?\(\s*[`'"]\s*(SELECT|INSERT|UPDATE|DELETE|WITH|SAVEPOINT|RELEASE|ROLLBACK|CREATE|ALTER|DROP|LOCK)\b/i;

describe('layout', () => {
  it('finds the service sources it checks', () => {
    expect(serviceFiles.length).toBeGreaterThan(50);
    expect(serviceFiles.some((f) => f.includes('/store/'))).toBe(true);
  });

  it('runs SQL only in store/ folders', () => {
    const offenders = serviceFiles.filter((f) => !f.includes('/store/') && SQL_CALL.test(readFileSync(f, 'utf8'))).map(rel);
    expect(offenders).toEqual([]);
  });

  it('the SQL check recognises a statement', () => {
    expect(SQL_CALL.test('await tx.query<{ n: number }>(`SELECT 1`)')).toBe(true);
    expect(SQL_CALL.test("await d.db.query('UPDATE billing.subscriptions SET x = 1')")).toBe(true);
    expect(SQL_CALL.test('const { limit } = req.query;')).toBe(false);
  });

  it('keeps domain/ folders free of I/O: no store, handlers, bus or database imports', () => {
    const bad = /from\s+['"](\.\.\/store\/|\.\.\/handlers\/|\.\.\/main|pg['"]|@nats-io\/|node:(http|https|net|fs|child_process)['"]|\.\.\/.*-client\.js)/;
    const offenders = serviceFiles
      .filter((f) => f.includes('/domain/'))
      .filter((f) => bad.test(readFileSync(f, 'utf8')))
      .map(rel);
    expect(offenders).toEqual([]);
  });

  it('keeps the live statuses in one place', () => {
    const literal = /'pending',\s*'active',\s*'paused',\s*'past_due',\s*'payment_failed'/;
    const where = serviceFiles.filter((f) => !f.endsWith('migrations.ts') && literal.test(readFileSync(f, 'utf8'))).map(rel);
    expect(where).toEqual(['services/billing/src/domain/lifecycle.ts']);
  });
});
