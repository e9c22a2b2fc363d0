import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * Outsiders choose URLs this deployment then connects to from inside (owners' webhook URLs, subscribers'
 * NWC relays), so such a URL must not reach loopback, link-local, private or otherwise non-public
 * addresses (SSRF): checked on the literal host and on every DNS answer, again before each use where the
 * caller can (DNS can change).
 */
const blocked = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const)
  blocked.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
  ['100::', 64],
  ['2001:db8::', 32],
] as const)
  blocked.addSubnet(net, bits, 'ipv6');

/** True for any address a webhook must not be sent to. Unparseable input counts as private. */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return blocked.check(address, 'ipv4');
  if (family !== 6) return true;
  const lower = address.toLowerCase();
  // An IPv4 address wrapped in IPv6 (::ffff:10.0.0.1, NAT64 64:ff9b::a00:1) reaches that IPv4 host.
  const embedded = embeddedIpv4(lower);
  if (embedded) return isPrivateAddress(embedded);
  return blocked.check(lower, 'ipv6');
}

function embeddedIpv4(v6: string): string | undefined {
  const m = /^(?:::ffff:|::ffff:0:|64:ff9b::)(.+)$/.exec(v6);
  if (!m) return undefined;
  const tail = m[1]!;
  if (isIP(tail) === 4) return tail;
  const parts = tail.split(':');
  if (parts.length !== 2) return undefined;
  const n = (parseInt(parts[0]!, 16) << 16) | parseInt(parts[1]!, 16);
  if (Number.isNaN(n)) return undefined;
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export interface AddressPolicy {
  allowPrivate: boolean;
}

export class UrlNotAllowed extends Error {}

export type Resolve = (host: string) => Promise<string[]>;

const resolveAll: Resolve = (host) =>
  new Promise((resolve, reject) => dnsLookup(host, { all: true }, (err, addrs: LookupAddress[]) => (err ? reject(err) : resolve(addrs.map((a) => a.address)))));

/** Throws UrlNotAllowed with a sentence saying why this deployment may not connect to the URL. */
export async function checkWebhookUrl(
  raw: string,
  policy: AddressPolicy,
  resolve: Resolve = resolveAll,
  protocols: readonly string[] = ['http:', 'https:'],
): Promise<void> {
  const host = checkUrlWithoutDns(raw, policy, protocols);
  if (host === undefined) return;
  let addresses: string[];
  try {
    addresses = await resolve(host);
  } catch {
    throw new UrlNotAllowed(`host ${host} does not resolve`);
  }
  if (!addresses.length) throw new UrlNotAllowed(`host ${host} does not resolve`);
  const bad = addresses.find(isPrivateAddress);
  if (bad) throw new UrlNotAllowed(`host ${host} resolves to a private, loopback or link-local address (${bad})`);
}

/**
 * The checks of `checkWebhookUrl` that need no DNS answer (form, protocol, a literal address). Returns the
 * host name whose addresses are still to be checked, or undefined when nothing is left: enough for a
 * client that connects through `guardedLookup`, which checks the very addresses it connects to.
 */
export function checkUrlWithoutDns(raw: string, policy: AddressPolicy, protocols: readonly string[] = ['http:', 'https:']): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UrlNotAllowed('is not a valid URL');
  }
  if (!protocols.includes(url.protocol)) throw new UrlNotAllowed(`must be a ${protocols.map((p) => `${p}//`).join(' or ')} URL`);
  if (policy.allowPrivate) return undefined;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host)) {
    if (isPrivateAddress(host)) throw new UrlNotAllowed(`points at a private, loopback or link-local address (${host})`);
    return undefined;
  }
  return host;
}

/**
 * The DNS lookup the HTTP client connects with: the addresses it checks are the very ones it connects to,
 * so a name cannot pass the check with one answer and then be connected with another (DNS rebinding).
 */
export function guardedLookup(policy: AddressPolicy): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addrs: LookupAddress[]) => {
      if (err) return callback(err, '', 0);
      const bad = policy.allowPrivate ? undefined : addrs.find((a) => isPrivateAddress(a.address));
      if (bad) return callback(new UrlNotAllowed(`host ${hostname} resolves to a private address (${bad.address})`), '', 0);
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addrs);
      const first = addrs[0];
      if (!first) return callback(new UrlNotAllowed(`host ${hostname} does not resolve`), '', 0);
      callback(null, first.address, first.family);
    });
  };
}
