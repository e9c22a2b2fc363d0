import { describe, expect, it } from 'vitest';
import { boundedPerRelay } from '../src/sockets.js';

describe('boundedPerRelay', () => {
  it('checks at most n events of each relay and refuses the rest unchecked; each relay has its own budget', () => {
    const checked: string[] = [];
    const verify = boundedPerRelay((e: { id: string }) => {
      checked.push(e.id);
      return e.id !== 'forged';
    }, 3);
    const flood = Array.from({ length: 10 }, () => verify({ id: 'forged' }, 'wss://flood.example'));
    expect(flood.every((ok) => ok === false)).toBe(true);
    expect(checked).toHaveLength(3);
    // The relay that answers honestly is still heard.
    expect(verify({ id: 'info' }, 'wss://good.example')).toBe(true);
    expect(checked).toHaveLength(4);
  });
});
