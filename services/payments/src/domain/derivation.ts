import * as ecc from '@bitcoinerlab/secp256k1';
import { createBase58check } from '@scure/base';
import { BIP32Factory } from 'bip32';
import { crypto, networks, payments } from 'bitcoinjs-lib';

const bip32 = BIP32Factory(ecc);
const base58check = createBase58check(crypto.sha256);

export type KeyType = 'xpub' | 'zpub' | 'tpub' | 'vpub';
export type Network = 'mainnet' | 'testnet';

interface WatchonlyKey {
  key_type: KeyType;
  network: Network;
  /** The same key with xpub/tpub version bytes: what bip32's `fromBase58` reads. */
  normalized: string;
}

/** SLIP-132 version bytes of the extended keys we accept, and what the xpub/tpub form of each is. */
const PUBLIC: Record<number, { key_type: KeyType; network: Network; as: number }> = {
  0x0488b21e: { key_type: 'xpub', network: 'mainnet', as: 0x0488b21e },
  0x04b24746: { key_type: 'zpub', network: 'mainnet', as: 0x0488b21e },
  0x043587cf: { key_type: 'tpub', network: 'testnet', as: 0x043587cf },
  0x045f1cf6: { key_type: 'vpub', network: 'testnet', as: 0x043587cf },
};
/** Recognised only to say what is wrong with them. */
const PRIVATE = new Set([0x0488ade4, 0x049d7878, 0x04b2430c, 0x04358394, 0x044a4e28, 0x045f18bc]);
const WRAPPED_SEGWIT = new Set([0x049d7cb2, 0x044a5262]);

/** Why a string is not an extended public key we can watch; the owner sees it in a 422. */
export class InvalidExtendedKey extends Error {}

/**
 * Reads an account-level extended public key (`m/84'/0'/0'` for zpub), as wallets export it. A private
 * key is refused outright: this service must never be able to spend the owner's coins.
 */
export function parseExtendedKey(text: string): WatchonlyKey {
  let raw: Uint8Array;
  try {
    raw = base58check.decode(text.trim());
  } catch {
    throw new InvalidExtendedKey('Not an extended public key (xpub, zpub, tpub or vpub): the base58 checksum does not match');
  }
  if (raw.length !== 78) throw new InvalidExtendedKey('Not an extended public key (xpub, zpub, tpub or vpub): wrong length');
  const version = new DataView(raw.buffer, raw.byteOffset, 4).getUint32(0);
  if (PRIVATE.has(version)) {
    throw new InvalidExtendedKey(
      'This is an extended private key; give the watch-only extended public key (xpub, zpub, tpub or vpub) instead, and keep the private key secret',
    );
  }
  if (WRAPPED_SEGWIT.has(version)) throw new InvalidExtendedKey('ypub/upub (P2SH-wrapped segwit) keys are not supported; export the native segwit zpub/vpub');
  const kind = PUBLIC[version];
  if (!kind) throw new InvalidExtendedKey('Not an extended public key (xpub, zpub, tpub or vpub): unknown version bytes');
  const swapped = Uint8Array.from(raw);
  new DataView(swapped.buffer).setUint32(0, kind.as);
  const normalized = base58check.encode(swapped);
  try {
    // bip32 checks that the key data is a valid compressed point.
    bip32.fromBase58(normalized, networkOf(kind.network));
  } catch {
    throw new InvalidExtendedKey('Not a valid extended public key: its key data is not a point on the curve');
  }
  return { key_type: kind.key_type, network: kind.network, normalized };
}

const networkOf = (n: Network) => (n === 'mainnet' ? networks.bitcoin : networks.testnet);

/**
 * The receive address `m/0/<index>` below the account key: BIP84 native segwit (P2WPKH), whatever the
 * key's prefix. An xpub/tpub is taken as a native segwit account too (the usual export of descriptor
 * wallets such as Sparrow or Bitcoin Core); P2WPKH is the only script this service derives.
 */
export function receiveAddress(key: Pick<WatchonlyKey, 'normalized' | 'network'>, index: number): string {
  if (!Number.isInteger(index) || index < 0 || index >= 0x80000000) throw new RangeError(`derivation index out of range: ${index}`);
  const network = networkOf(key.network);
  const child = bip32.fromBase58(key.normalized, network).derive(0).derive(index);
  const address = payments.p2wpkh({ pubkey: child.publicKey, network }).address;
  if (!address) throw new Error('p2wpkh gave no address');
  return address;
}
