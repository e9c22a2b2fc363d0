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
  /** Holds time still for every service (two moves land in one second), or lets it run on. */
  const hold = async (on: boolean): Promise<number> => {
    const res = await admin().post('/dev/clock', { hold: on });
    expect(res.status).toBe(200);
    expect(res.body.held).toBe(on);
    return res.body.now;
  };
  return { now, advance, advanceTo, hold };
}
