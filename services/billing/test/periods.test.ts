import { describe, expect, it } from 'vitest';
import { periodEnd } from '../src/domain/periods.js';

const ts = (iso: string) => Date.parse(iso) / 1000;
const iso = (t: number) => new Date(t * 1000).toISOString().slice(0, 19);

describe('periodEnd', () => {
  it('weekly adds 7 days', () => {
    expect(iso(periodEnd(ts('2026-12-29T10:00:00Z'), 1, 'weekly'))).toBe('2027-01-05T10:00:00');
    expect(iso(periodEnd(ts('2026-12-29T10:00:00Z'), 3, 'weekly'))).toBe('2027-01-19T10:00:00');
  });

  it('monthly from 31 January lands on each month’s last day, from the anchor', () => {
    const anchor = ts('2027-01-31T08:30:00Z');
    const ends = Array.from({ length: 12 }, (_, i) => iso(periodEnd(anchor, i + 1, 'monthly')).slice(0, 10));
    expect(ends).toEqual([
      '2027-02-28',
      '2027-03-31',
      '2027-04-30',
      '2027-05-31',
      '2027-06-30',
      '2027-07-31',
      '2027-08-31',
      '2027-09-30',
      '2027-10-31',
      '2027-11-30',
      '2027-12-31',
      '2028-01-31',
    ]);
    expect(iso(periodEnd(anchor, 1, 'monthly'))).toBe('2027-02-28T08:30:00');
  });

  it('monthly uses 29 February in leap years', () => {
    expect(iso(periodEnd(ts('2028-01-31T00:00:00Z'), 1, 'monthly'))).toBe('2028-02-29T00:00:00');
    expect(iso(periodEnd(ts('2028-01-30T00:00:00Z'), 2, 'monthly'))).toBe('2028-03-30T00:00:00');
  });

  it('monthly crosses year ends', () => {
    expect(iso(periodEnd(ts('2026-11-15T12:00:00Z'), 3, 'monthly'))).toBe('2027-02-15T12:00:00');
  });

  it('yearly keeps the date; 29 February becomes 28 February, and 29 again in a leap year', () => {
    const leap = ts('2028-02-29T06:00:00Z');
    expect(iso(periodEnd(leap, 1, 'yearly'))).toBe('2029-02-28T06:00:00');
    expect(iso(periodEnd(leap, 4, 'yearly'))).toBe('2032-02-29T06:00:00');
    expect(iso(periodEnd(ts('2027-03-01T00:00:00Z'), 1, 'yearly'))).toBe('2028-03-01T00:00:00');
  });

  it('n = 0 is the anchor itself', () => {
    const a = ts('2027-05-31T00:00:00Z');
    for (const i of ['weekly', 'monthly', 'yearly'] as const) expect(periodEnd(a, 0, i)).toBe(a);
  });
});
