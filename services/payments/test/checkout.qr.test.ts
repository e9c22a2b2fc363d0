import QRCode from 'qrcode';
import { describe, expect, it } from 'vitest';
import { bip21Uri, qrSegments } from '../src/domain/checkout.js';

const INVOICE = `lnbc10u1p${'qpzry9x8gf2tvdw0s3jn54khce6mua7l'.repeat(9)}`;
const ADDRESS = 'bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq';

describe('QR segments of checkout codes', () => {
  const texts = {
    lightning: `LIGHTNING:${INVOICE.toUpperCase()}`,
    onchain: bip21Uri(ADDRESS, 12_345, null, true),
    bip21: bip21Uri(ADDRESS, 12_345, INVOICE, true),
    base58: bip21Uri('1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN2', 1000, null, true),
  };

  it('cut the text without losing or reordering a character', () => {
    for (const text of Object.values(texts))
      expect(
        qrSegments(text)
          .map((s) => s.data.toString())
          .join(''),
      ).toBe(text);
  });

  it('put an upper-cased invoice and bech32 address in alphanumeric mode and the rest in byte mode', () => {
    expect(qrSegments(texts.lightning)).toEqual([{ data: texts.lightning, mode: 'alphanumeric' }]);
    expect(qrSegments(texts.bip21).map((s) => s.mode)).toEqual(['byte', 'alphanumeric', 'byte', 'alphanumeric']);
    expect(qrSegments(texts.bip21)[1]?.data).toBe(`:${ADDRESS.toUpperCase()}`);
    // A base58 address is case-sensitive: byte mode throughout.
    expect(qrSegments(texts.base58).every((s) => s.mode === 'byte')).toBe(true);
  });

  it('make codes no larger than the optimal segmentation the library searches for', () => {
    for (const text of Object.values(texts)) {
      const optimal = QRCode.create(text, { errorCorrectionLevel: 'M' }).version;
      expect(QRCode.create(qrSegments(text), { errorCorrectionLevel: 'M' }).version).toBeLessThanOrEqual(optimal);
    }
  });
});
