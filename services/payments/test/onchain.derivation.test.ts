import { pbkdf2Sync } from 'node:crypto';
import * as ecc from '@bitcoinerlab/secp256k1';
import { createBase58check } from '@scure/base';
import { BIP32Factory } from 'bip32';
import { crypto, networks } from 'bitcoinjs-lib';
import { describe, expect, it } from 'vitest';
import { InvalidExtendedKey, parseExtendedKey, receiveAddress } from '../src/domain/derivation.js';

/**
 * BIP84's test vectors (https://github.com/bitcoin/bips/blob/master/bip-0084.mediawiki): the mnemonic,
 * its account 0 zpub and first receive addresses. The zpub is also derived here from the mnemonic
 * (BIP39 seed = PBKDF2-HMAC-SHA512(mnemonic, "mnemonic", 2048)), so the vector is checked, not assumed.
 */
const MNEMONIC = 'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about';
const ZPUB = 'zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1ADqtfSdVCToUG868RvUUkgDKf31mGDtKsAYz2oz2AGutZYs';
const ZPRV = 'zprvAdG4iTXWBoARxkkzNpNh8r6Qag3irQB8PzEMkAFeTRXxHpbF9z4QgEvBRmfvqWvGp42t42nvgGpNgYSJA9iefm1yYNZKEm7z6qUWCroSQnE';
const ADDR_0 = 'bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu';
const ADDR_1 = 'bc1qnjg0jd8228aq7egyzacy8cys3knf9xvrerkf9g';
/** m/84'/1'/0'/0/0 of the same mnemonic on testnet (as Electrum, Sparrow and bitcoinjs derive it). */
const TESTNET_ADDR_0 = 'tb1q6rz28mcfaxtmd6v789l9rrlrusdprr9pqcpvkl';

const bip32 = BIP32Factory(ecc);
const b58 = createBase58check(crypto.sha256);
const seed = pbkdf2Sync(MNEMONIC.normalize('NFKD'), 'mnemonic', 2048, 64, 'sha512');

/** Re-encodes an extended key with other version bytes (SLIP-132 prefixes). */
function withVersion(key: string, version: number): string {
  const raw = b58.decode(key);
  new DataView(raw.buffer, raw.byteOffset).setUint32(0, version);
  return b58.encode(raw);
}

const mainAccount = bip32.fromSeed(seed).derivePath("m/84'/0'/0'");
const testAccount = bip32.fromSeed(seed, networks.testnet).derivePath("m/84'/1'/0'");
const XPUB = mainAccount.neutered().toBase58();
const TPUB = testAccount.neutered().toBase58();
const VPUB = withVersion(TPUB, 0x045f1cf6);

const rejected = (key: string) => {
  try {
    parseExtendedKey(key);
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidExtendedKey);
    return (err as Error).message;
  }
  throw new Error(`accepted ${key}`);
};

describe('BIP84 derivation from a watch-only key', () => {
  it("the vector's zpub is the mnemonic's m/84'/0'/0'", () => {
    expect(withVersion(XPUB, 0x04b24746)).toBe(ZPUB);
    expect(withVersion(mainAccount.toBase58(), 0x04b2430c)).toBe(ZPRV);
  });

  it('zpub -> the BIP84 receive addresses m/0/0 and m/0/1', () => {
    const key = parseExtendedKey(ZPUB);
    expect(key).toMatchObject({ key_type: 'zpub', network: 'mainnet', normalized: XPUB });
    expect(receiveAddress(key, 0)).toBe(ADDR_0);
    expect(receiveAddress(key, 1)).toBe(ADDR_1);
    expect(new Set(Array.from({ length: 50 }, (_, i) => receiveAddress(key, i))).size).toBe(50);
  });

  it('an xpub of the same account gives the same native segwit addresses', () => {
    const key = parseExtendedKey(` ${XPUB}\n`);
    expect(key).toMatchObject({ key_type: 'xpub', network: 'mainnet', normalized: XPUB });
    expect(receiveAddress(key, 0)).toBe(ADDR_0);
  });

  it('vpub and tpub: testnet P2WPKH addresses', () => {
    const v = parseExtendedKey(VPUB);
    const t = parseExtendedKey(TPUB);
    expect(v).toMatchObject({ key_type: 'vpub', network: 'testnet', normalized: TPUB });
    expect(t).toMatchObject({ key_type: 'tpub', network: 'testnet', normalized: TPUB });
    expect(receiveAddress(v, 0)).toBe(TESTNET_ADDR_0);
    expect(receiveAddress(t, 0)).toBe(TESTNET_ADDR_0);
    expect(receiveAddress(v, 1)).toMatch(/^tb1q[02-9ac-hj-np-z]{38}$/);
    expect(receiveAddress(v, 1)).not.toBe(TESTNET_ADDR_0);
  });

  it('refuses private keys of every kind, saying so', () => {
    for (const prv of [ZPRV, mainAccount.toBase58(), testAccount.toBase58(), withVersion(testAccount.toBase58(), 0x045f18bc)]) {
      expect(rejected(prv)).toMatch(/private key/);
    }
  });

  it('refuses garbage, a broken checksum, a ypub and a key whose data is not a curve point', () => {
    expect(rejected('hello')).toMatch(/Not an extended public key/);
    expect(rejected('')).toMatch(/Not an extended public key/);
    expect(rejected(ZPUB.slice(0, -1) + (ZPUB.endsWith('s') ? 't' : 's'))).toMatch(/checksum/);
    expect(rejected(ADDR_0)).toMatch(/Not an extended public key/);
    expect(rejected(withVersion(XPUB, 0x049d7cb2))).toMatch(/ypub/);
    expect(rejected(withVersion(XPUB, 0x01020304))).toMatch(/version/);
    const raw = b58.decode(XPUB);
    raw[45] = 0x05; // the public key's prefix byte: neither 02 nor 03
    expect(rejected(b58.encode(raw))).toMatch(/point/);
  });
});
