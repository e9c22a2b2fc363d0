import type { EventEnvelope } from '@sb/contracts';
import { describe, expect, it } from 'vitest';
import { tooOldToNotify } from '../src/events-consumer.js';

const DAY_MS = 86_400_000;
const wallNow = Date.UTC(2026, 10, 25, 12);
const at = (timestamp: number) => ({ timestamp }) as EventEnvelope;

describe('whether an event is too old to tell a person about', () => {
  it('counts its time in the stream by the wall clock, whatever the dev clock says', () => {
    const devNow = wallNow / 1000 + 30 * 86_400; // the dev clock moved 30 days ahead
    // Stored a minute ago, stamped two days before the (moved) clock: still news.
    expect(tooOldToNotify(at(devNow - 2 * 86_400), wallNow - 60_000, devNow, wallNow)).toBe(false);
    // Stored more than a day ago (a new durable reading the stream from its start): not sent to people.
    expect(tooOldToNotify(at(devNow), wallNow - DAY_MS - 1000, devNow, wallNow)).toBe(true);
    expect(tooOldToNotify(at(devNow), wallNow - DAY_MS + 1000, devNow, wallNow)).toBe(false);
  });

  it('without a stream time (a parked event replayed) compares its timestamp with the clock', () => {
    const now = wallNow / 1000;
    expect(tooOldToNotify(at(now - 86_400 - 1), undefined, now, wallNow)).toBe(true);
    expect(tooOldToNotify(at(now - 3600), undefined, now, wallNow)).toBe(false);
  });
});
