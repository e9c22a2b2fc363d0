import { schnorr } from '@noble/curves/secp256k1.js';

/** A parsed `nostr+walletconnect://` string. The secret is the client's key for this wallet: handle as a password. */
export interface WalletConnection {
  /** The wallet service's pubkey (x-only, hex). */
  pubkey: string;
  /** Every relay given, in order. */
  relays: string[];
  /** Hex of the client secret key. */
  secret: string;
  lud16?: string;
}

/** The connection string is unusable; `message` is the sentence shown to the subscriber. */
export class ConnectionStringError extends Error {}

const HEX64 = /^[0-9a-f]{64}$/;
/** Wallets name one relay or a few. */
export const MAX_RELAYS = 10;
const SCHEME = 'nostr+walletconnect:';

function isLoopback(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * Parses a NIP-47 connection string strictly: the wallet pubkey and the secret are 64 hex characters
 * and valid keys, and at least one relay is `wss://` (or `ws://` to this machine only: plain WebSocket
 * would expose the traffic on the network). Relays that are not are left out, never contacted
 * (behaviour.md: "at least one wss:// relay"); with none left the first one's fault is the refusal.
 * Throws ConnectionStringError with a sentence for the subscriber; the sentence never repeats the secret.
 */
export function parseConnectionString(input: string): WalletConnection {
  const s = input.trim();
  if (!s) throw new ConnectionStringError('The connection string is empty: paste the whole nostr+walletconnect:// string from your wallet');
  if (!s.toLowerCase().startsWith(`${SCHEME}//`)) {
    throw new ConnectionStringError('The connection string must start with nostr+walletconnect://');
  }
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw new ConnectionStringError('The connection string is not a valid nostr+walletconnect:// URL');
  }
  // Some wallets write `nostr+walletconnect:<pubkey>`; the URL parser puts the pubkey in host or path.
  const pubkey = (url.hostname || url.pathname.replace(/^\/+/, '')).toLowerCase();
  if (!HEX64.test(pubkey)) throw new ConnectionStringError('The wallet public key in the connection string must be 64 hexadecimal characters');
  try {
    schnorr.utils.lift_x(BigInt(`0x${pubkey}`));
  } catch {
    throw new ConnectionStringError('The wallet public key in the connection string is not a valid key');
  }
  const secrets = url.searchParams.getAll('secret');
  if (secrets.length !== 1) throw new ConnectionStringError('The connection string must contain exactly one secret');
  const secret = secrets[0]!.toLowerCase();
  if (!HEX64.test(secret)) throw new ConnectionStringError('The secret in the connection string must be 64 hexadecimal characters');
  try {
    schnorr.getPublicKey(Buffer.from(secret, 'hex'));
  } catch {
    throw new ConnectionStringError('The secret in the connection string is not a valid key');
  }
  const relays = url.searchParams.getAll('relay');
  if (relays.length === 0) throw new ConnectionStringError('The connection string names no relay');
  // Each is looked up and may be connected to: a bound on what one anonymous request costs.
  if (relays.length > MAX_RELAYS) throw new ConnectionStringError(`The connection string names ${relays.length} relays; it may name at most ${MAX_RELAYS}`);
  const seen = new Set<string>();
  let fault: string | undefined;
  for (const r of relays) {
    const why = relayFault(r);
    if (why) fault ??= why;
    else seen.add(r);
  }
  if (!seen.size) throw new ConnectionStringError(fault!);
  const lud16 = url.searchParams.get('lud16');
  return { pubkey, relays: [...seen], secret, ...(lud16 ? { lud16 } : {}) };
}

/** Why a relay of a connection string cannot be used (a sentence), or undefined when it can. */
function relayFault(r: string): string | undefined {
  let relay: URL;
  try {
    relay = new URL(r);
  } catch {
    return `The relay "${r.slice(0, 100)}" is not a valid URL`;
  }
  if (relay.protocol === 'ws:' && !isLoopback(relay.hostname)) return `The relay ${relay.host} uses unencrypted ws://; use a wss:// relay`;
  if (relay.protocol !== 'wss:' && relay.protocol !== 'ws:') return `The relay "${r.slice(0, 100)}" is not a wss:// WebSocket URL`;
  if (relay.username || relay.password) return 'A relay URL must not carry a user name or password';
  return undefined;
}
