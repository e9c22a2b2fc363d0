import { expect } from 'vitest';
import type { client } from './http.js';

/** The DEV_MODE test clock through HTTP, as an owner moves it. */
export function devClock(admin: () => ReturnType<typeof client>) {
  const now = async (): Promise<number> => (await admin().post('/dev/clock', {})).body.now;
  const advance = async (seconds: number): Promise<number> => {
    const res = await admin().post('/dev/clock', { advance_seconds: Math.max(0, Math.round(seconds)) });
    expect(res.status).toBe(200);
    return res.body.now;
  };
  const advanceTo = async (t: number): Promise<number> => advance(t - (await now()));
  return { now, advance, advanceTo };
}
