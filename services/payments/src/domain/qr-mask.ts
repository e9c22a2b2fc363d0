/**
 * The QR mask choice of the `qrcode` library, computed on the raw module arrays. The library tries all
 * eight masks through per-module method calls (apply, score with four passes, undo): 60% of the CPU a
 * Lightning checkout costs the payments service. Same rules, same scores, so the same mask and the same
 * code, byte for byte (test/qr-mask.test.ts compares them).
 */

import { createRequire } from 'node:module';

/** What the library's BitMatrix holds: modules and reserved (function-pattern) flags, row-major. */
export interface Modules {
  size: number;
  data: Uint8Array;
  reservedBit: Uint8Array;
}

/** ISO 18004's penalty weights, as the library has them. */
const N1 = 3;
const N2 = 3;
const N3 = 40;
const N4 = 10;

/** Whether mask `p` flips the module at row i, column j (the library's getMaskAt). */
function maskBit(p: number, i: number, j: number): boolean {
  switch (p) {
    case 0:
      return (i + j) % 2 === 0;
    case 1:
      return i % 2 === 0;
    case 2:
      return j % 3 === 0;
    case 3:
      return (i + j) % 3 === 0;
    case 4:
      return (Math.floor(i / 2) + Math.floor(j / 3)) % 2 === 0;
    case 5:
      return ((i * j) % 2) + ((i * j) % 3) === 0;
    case 6:
      return (((i * j) % 2) + ((i * j) % 3)) % 2 === 0;
    default:
      return (((i * j) % 3) + ((i + j) % 2)) % 2 === 0;
  }
}

/** N1 and N3 over the `size` modules of `m` from `start`, `step` apart (1: a row, size: a column). */
function linePenalty(m: Uint8Array, start: number, step: number, size: number): number {
  let points = 0;
  let last = -1;
  let same = 0;
  let bits = 0;
  for (let k = 0, at = start; k < size; k++, at += step) {
    const v = m[at]!;
    if (v === last) same++;
    else {
      if (same >= 5) points += N1 + (same - 5);
      last = v;
      same = 1;
    }
    bits = ((bits << 1) & 0x7ff) | v;
    if (k >= 10 && (bits === 0x5d0 || bits === 0x05d)) points += N3;
  }
  if (same >= 5) points += N1 + (same - 5);
  return points;
}

/** The library's N1 + N2 + N3 + N4 of a masked symbol with `dark` dark modules. */
export function penalty(m: Uint8Array, size: number, dark: number): number {
  let points = 0;
  for (let r = 0; r < size; r++) points += linePenalty(m, r * size, 1, size) + linePenalty(m, r, size, size);
  let blocks = 0;
  for (let r = 0; r < size - 1; r++) {
    const a = r * size;
    const b = a + size;
    let left = m[a]! + m[b]!;
    for (let c = 1; c < size; c++) {
      const right = m[a + c]! + m[b + c]!;
      const s = left + right;
      if (s === 4 || s === 0) blocks++;
      left = right;
    }
  }
  points += blocks * N2;
  return points + Math.abs(Math.ceil((dark * 100) / m.length / 5) - 10) * N4;
}

/**
 * The eight masks of a symbol size as 0/1 arrays, 0 on its reserved modules (those are never masked).
 * The reserved layout depends on the version alone, so one set serves every symbol of a size; the
 * layout it was made for is kept and compared, so a symbol with another never gets a wrong mask.
 */
const maskSets = new Map<number, { reserved: Uint8Array; masks: Uint8Array[] }>();

function masksOf(size: number, reservedBit: Uint8Array): Uint8Array[] {
  const known = maskSets.get(size);
  if (known && Buffer.compare(known.reserved, reservedBit) === 0) return known.masks;
  const masks = Array.from({ length: 8 }, (_, p) => {
    const mask = new Uint8Array(size * size);
    for (let i = 0, at = 0; i < size; i++) for (let j = 0; j < size; j++, at++) mask[at] = !reservedBit[at] && maskBit(p, i, j) ? 1 : 0;
    return mask;
  });
  maskSets.set(size, { reserved: Uint8Array.from(reservedBit), masks });
  return masks;
}

/**
 * The mask with the lowest penalty, the first of equals (the library's getBestMask). `setupFormat(p)`
 * writes mask p's format bits into the reserved modules, as the library's loop does before it scores.
 */
export function bestMask(modules: Modules, setupFormat: (p: number) => void): number {
  const { size, data, reservedBit } = modules;
  const masks = masksOf(size, reservedBit);
  const masked = new Uint8Array(data.length);
  let best = 0;
  let lowest = Number.POSITIVE_INFINITY;
  for (let p = 0; p < 8; p++) {
    setupFormat(p);
    const mask = masks[p]!;
    let dark = 0;
    for (let at = 0; at < data.length; at++) {
      const v = data[at]! ^ mask[at]!;
      masked[at] = v;
      dark += v;
    }
    const score = penalty(masked, size, dark);
    if (score < lowest) {
      lowest = score;
      best = p;
    }
  }
  return best;
}

/**
 * Has the library use `bestMask`: its symbol builder calls `getBestMask` on its mask module's exports
 * at each call, so replacing the export is enough. Returns the library's own, for comparison.
 */
export function useFastQrMask(): (modules: Modules, setupFormat: (p: number) => void) => number {
  const maskModule = createRequire(import.meta.url)('qrcode/lib/core/mask-pattern.js') as { getBestMask: typeof bestMask; ours?: true };
  const theirs = maskModule.getBestMask;
  if (!maskModule.ours) Object.assign(maskModule, { getBestMask: bestMask, ours: true, theirs });
  return (maskModule as unknown as { theirs: typeof bestMask }).theirs;
}
