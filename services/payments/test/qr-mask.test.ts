import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import QRCode from 'qrcode';
import { describe, expect, it } from 'vitest';
import { bip21Uri, qrSegments } from '../src/domain/checkout.js';
import { bestMask, useFastQrMask } from '../src/domain/qr-mask.js';

/** The library's mask module, whose getBestMask the payments service replaces. */
const maskModule = createRequire(import.meta.url)('qrcode/lib/core/mask-pattern.js') as { getBestMask: unknown };
/** Importing checkout.ts put ours in place. */
const installed = maskModule.getBestMask;
const theirs = useFastQrMask();

/** The SVG and mask the library makes for `text`, with its own mask choice or ours. */
function render(text: string, mask: 'theirs' | 'ours') {
  maskModule.getBestMask = mask === 'theirs' ? theirs : bestMask;
  try {
    const opts = { errorCorrectionLevel: 'M', margin: 2 } as const;
    return { svg: QRCode.toString(qrSegments(text), { type: 'svg', ...opts }), mask: QRCode.create(qrSegments(text), opts).maskPattern };
  } finally {
    maskModule.getBestMask = bestMask;
  }
}

const bech32Chars = 'QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L';
const invoice = (n: number) => `LNBC${n}U1P${Array.from(randomBytes(300 + (n % 200)), (b) => bech32Chars[b % 32]).join('')}`;

describe('the QR mask choice', () => {
  it("gives byte for byte the library's own codes: invoices, addresses, URIs and arbitrary text", async () => {
    const texts = [
      ...Array.from({ length: 100 }, (_, i) => `LIGHTNING:${invoice(i + 1)}`),
      // Symbol sizes from version 1 to 26, in both modes (1,500 alphanumeric characters and 1,000 bytes
      // are version 26 at level M).
      ...Array.from({ length: 60 }, (_, i) => 'Q'.repeat(1 + i * 25)),
      ...Array.from({ length: 40 }, (_, i) => randomBytes(1 + i * 13).toString('hex')),
      ...Array.from({ length: 20 }, (_, i) =>
        bip21Uri(`bc1q${randomBytes(20).toString('hex').slice(0, 38)}`, 1000 + i, i % 2 ? invoice(i).toLowerCase() : null, true),
      ),
      ...Array.from({ length: 20 }, (_, i) => randomBytes(5 + i * 13).toString('base64')),
      'a',
      'https://example.com/pay?x=1',
    ];
    const masks = new Set<number>();
    const versions = new Set<number>();
    for (const text of texts) {
      versions.add(QRCode.create(qrSegments(text), { errorCorrectionLevel: 'M' }).version);
      const [a, b] = [render(text, 'theirs'), render(text, 'ours')];
      expect(await b.svg).toBe(await a.svg);
      expect(b.mask).toBe(a.mask);
      masks.add(a.mask);
    }
    // The texts exercise the choice: every mask is chosen somewhere, on every size up to version 26.
    expect(masks.size).toBe(8);
    expect([...versions].sort((a, b) => a - b)).toEqual(Array.from({ length: 26 }, (_, i) => i + 1));
  });

  it('is the one in place once the checkout code is loaded', () => {
    expect(installed).toBe(bestMask);
    expect(theirs).not.toBe(bestMask);
  });
});
