/**
 * The QR mask choice of the `qrcode` library, computed on the raw module arrays. The library tries all
 * eight masks through per-module method calls (apply, score with four passes, undo): 60% of the CPU a
 * Lightning checkout cost the payments service. Here the eight masked symbols are one array of bytes
 * (a bit per mask) scored in one pass per rule: 0.21 ms a Lightning code against 0.66 ms for the eight
 * passes of session 11's version (Intel Xeon, 2 cores). Same rules, same scores, so the same mask and
 * the same code, byte for byte (test/qr-mask.test.ts compares them).
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

/**
 * The symbol under all eight masks at once: bit p of a module's byte is its value under mask p. Each
 * rule then runs once over the symbol instead of eight times, on bytes, and what it finds is counted
 * per byte value (`hits`); the byte values' bits say which masks each count belongs to (`perMask`).
 */
interface Layout {
  reserved: Uint8Array;
  /** Bit p: whether mask p flips the module (never a reserved one). */
  flips: Uint8Array;
  /** The reserved modules, where the format bits (which differ per mask) are. */
  reservedAt: Int32Array;
}

const layouts = new Map<number, Layout>();

function layoutOf(size: number, reservedBit: Uint8Array): Layout {
  const known = layouts.get(size);
  if (known && Buffer.compare(known.reserved, reservedBit) === 0) return known;
  const flips = new Uint8Array(size * size);
  const reservedAt: number[] = [];
  for (let i = 0, at = 0; i < size; i++) {
    for (let j = 0; j < size; j++, at++) {
      if (reservedBit[at]) {
        reservedAt.push(at);
        continue;
      }
      for (let p = 0; p < 8; p++) if (maskBit(p, i, j)) flips[at]! |= 1 << p;
    }
  }
  const layout = { reserved: Uint8Array.from(reservedBit), flips, reservedAt: Int32Array.from(reservedAt) };
  layouts.set(size, layout);
  return layout;
}

/** Adds to `out[p]` `weight` times the count of each byte value whose bit p is set. */
function perMask(hits: Uint32Array, weight: number, out: Float64Array): void {
  for (let v = 1; v < 256; v++) {
    const n = hits[v]!;
    if (n === 0) continue;
    for (let p = 0; p < 8; p++) if (v & (1 << p)) out[p]! += n * weight;
  }
}

/**
 * N1 and N3 over the `size` modules of `m` from `start`, `step` apart (1: a row, size: a column), for the
 * eight masks at once. N1: a run of L >= 5 same modules scores 3 + (L - 5), which is the number of its
 * windows of five (L - 4) plus 2 for its first one. N3: 1011101 with four light modules on either side.
 */
function lineHits(
  m: Uint8Array,
  start: number,
  step: number,
  size: number,
  windows: Uint32Array,
  runs: Uint32Array,
  finders: Uint32Array,
  core: Uint8Array,
  light: Uint8Array,
): void {
  // core[j]: 1011101 starts at j; light[j]: four light modules start at j.
  for (let j = 0, at = start; j < size; j++, at += step) {
    const a = m[at]!;
    if (j + 4 <= size) {
      const b = m[at + step]!;
      const c = m[at + 2 * step]!;
      const d = m[at + 3 * step]!;
      light[j] = ~(a | b | c | d) & 0xff;
      core[j] = j + 7 <= size ? a & ~b & c & d & m[at + 4 * step]! & ~m[at + 5 * step]! & m[at + 6 * step]! & 0xff : 0;
    }
  }
  let e1 = 0;
  let e2 = 0;
  let e3 = 0;
  let window = 0;
  let prev = m[start]!;
  for (let k = 1, at = start + step; k < size; k++, at += step) {
    const v = m[at]!;
    const same = ~(v ^ prev) & 0xff;
    prev = v;
    if (k >= 4) {
      const w = same & e1 & e2 & e3;
      if (w) {
        windows[w]!++;
        const first = w & ~window;
        if (first) runs[first]!++;
      }
      window = w;
    }
    e3 = e2;
    e2 = e1;
    e1 = same;
    if (k >= 10) {
      const f = (core[k - 10]! & light[k - 3]!) | (light[k - 10]! & core[k - 6]!);
      if (f) finders[f]!++;
    }
  }
}

/**
 * The mask with the lowest penalty, the first of equals (the library's getBestMask), scored as the
 * library scores (N1 + N2 + N3 + N4). `setupFormat(p)` writes mask p's format bits into the reserved
 * modules, as the library's loop does before it scores.
 */
export function bestMask(modules: Modules, setupFormat: (p: number) => void): number {
  const { size, data, reservedBit } = modules;
  const { flips, reservedAt } = layoutOf(size, reservedBit);
  const n = data.length;
  const all = new Uint8Array(n);
  setupFormat(0);
  for (let at = 0; at < n; at++) all[at] = (data[at] ? 0xff : 0) ^ flips[at]!;
  for (let p = 1; p < 8; p++) {
    setupFormat(p);
    const bit = 1 << p;
    for (let r = 0; r < reservedAt.length; r++) {
      const at = reservedAt[r]!;
      all[at] = data[at] ? all[at]! | bit : all[at]! & ~bit;
    }
  }
  const windows = new Uint32Array(256);
  const runs = new Uint32Array(256);
  const finders = new Uint32Array(256);
  const blocks = new Uint32Array(256);
  const dark = new Uint32Array(256);
  const core = new Uint8Array(size);
  const light = new Uint8Array(size);
  for (let r = 0; r < size; r++) {
    lineHits(all, r * size, 1, size, windows, runs, finders, core, light);
    lineHits(all, r, size, size, windows, runs, finders, core, light);
  }
  for (let at = 0; at < n; at++) dark[all[at]!]!++;
  for (let r = 0; r < size - 1; r++) {
    const a = r * size;
    const b = a + size;
    let left = all[a]!;
    let leftBelow = all[b]!;
    for (let c = 1; c < size; c++) {
      const right = all[a + c]!;
      const rightBelow = all[b + c]!;
      const same = ~((left ^ right) | (left ^ leftBelow) | (left ^ rightBelow)) & 0xff;
      if (same) blocks[same]!++;
      left = right;
      leftBelow = rightBelow;
    }
  }
  const points = new Float64Array(8);
  perMask(windows, 1, points);
  perMask(runs, N1 - 1, points);
  perMask(blocks, N2, points);
  perMask(finders, N3, points);
  const darkOf = new Float64Array(8);
  perMask(dark, 1, darkOf);
  let best = 0;
  let lowest = Number.POSITIVE_INFINITY;
  for (let p = 0; p < 8; p++) {
    const score = points[p]! + Math.abs(Math.ceil((darkOf[p]! * 100) / n / 5) - 10) * N4;
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
