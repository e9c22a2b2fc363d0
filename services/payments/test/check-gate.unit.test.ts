import { describe, expect, it } from 'vitest';
import { CheckGate } from '../src/check-gate.js';

describe('CheckGate', () => {
  it('one check per payment per interval; payments apart; an old turn forgotten', () => {
    let now = 1_000;
    const gate = new CheckGate(1_000, () => now);
    expect(gate.take('a')).toBe(true);
    expect(gate.take('a')).toBe(false);
    expect(gate.take('b')).toBe(true);
    now += 999;
    expect(gate.take('a')).toBe(false);
    now += 1;
    expect(gate.take('a')).toBe(true);
    expect(gate.take('b')).toBe(true);
    // A hundred thousand payments checked once each, a second apart: none kept past its interval.
    let taken = 0;
    for (let i = 0; i < 100_000; i++) {
      now += 1_000;
      if (gate.take(`p${i}`)) taken++;
    }
    expect(taken).toBe(100_000);
    expect((gate as unknown as { last: Map<string, number> }).last.size).toBe(1);
  });

  it('a callback waits for a check that starts after it arrived: its own, or one another caller started', async () => {
    const gate = new CheckGate(100);
    expect(gate.take('a')).toBe(true);
    const started = Date.now();
    // Ten callbacks inside the interval: one check after it, made by one of them; the others answered by it.
    const turns = await Promise.all(Array.from({ length: 10 }, () => gate.turn('a')));
    expect(Date.now() - started).toBeGreaterThanOrEqual(95);
    expect(turns.filter(Boolean)).toHaveLength(1);
    // One that arrives after that check started waits for the next.
    const later = Date.now();
    expect(await gate.turn('a')).toBe(true);
    expect(Date.now() - later).toBeGreaterThanOrEqual(50);
  });
});
