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

/** IPv6 ranges refused whole: local-use NAT64 (a local translator) and Teredo (an IPv4 host behind a tunnel). */
for (const [net, bits] of [
  ['64:ff9b:1::', 48],
  ['2001::', 32],
] as const)
  blocked.addSubnet(net, bits, 'ipv6');

/** True for any address a webhook must not be sent to. Unparseable input counts as private. */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return blocked.check(address, 'ipv4');
  if (family !== 6) return true;
  // An IPv4 address inside IPv6 reaches that IPv4 host, whichever way it is spelled.
  const embedded = embeddedIpv4(address);
  if (embedded) return isPrivateAddress(embedded);
  return blocked.check(address, 'ipv6');
}

/** The 16 bytes of a valid IPv6 address (any spelling: `::`, a dotted IPv4 tail, a zone). */
function ipv6Bytes(address: string): number[] {
  let text = address.replace(/%.*$/, '').toLowerCase();
  let tail: number[] = [];
  const dotted = /:(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    tail = dotted[1]!.split('.').map(Number);
    text = `${text.slice(0, dotted.index)}:0:0`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const left = head ? head.split(':') : [];
  const right = rest ? rest.split(':') : [];
  const groups = rest === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  const bytes = groups.flatMap((g) => [parseInt(g, 16) >> 8, parseInt(g, 16) & 255]);
  if (tail.length) bytes.splice(12, 4, ...tail);
  return bytes;
}

/**
 * The IPv4 address an IPv6 one carries: IPv4-compatible (::a.b.c.d), IPv4-mapped (::ffff:a.b.c.d),
 * IPv4-translated (::ffff:0:a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:AABB:CCDD::).
 */
function embeddedIpv4(address: string): string | undefined {
  const b = ipv6Bytes(address);
  const zero = (from: number, to: number) => b.slice(from, to).every((x) => x === 0);
  const v4 = (at: number) => b.slice(at, at + 4).join('.');
  if (zero(0, 10) && ((b[10] === 0xff && b[11] === 0xff) || (b[10] === 0 && b[11] === 0))) return v4(12);
  if (zero(0, 8) && b[8] === 0xff && b[9] === 0xff && zero(10, 12)) return v4(12);
  if (b[0] === 0 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(4, 12)) return v4(12);
  if (b[0] === 0x20 && b[1] === 0x02) return v4(2);
  return undefined;
}

export interface AddressPolicy {
  allowPrivate: boolean;
}

export class UrlNotAllowed extends Error {}

export type Resolve = (host: string) => Promise<string[]>;

const resolveAll: Resolve = (host) =>
  new Promise((resolve, reject) => dnsLookup(host, { all: true }, (err, addrs: LookupAddress[]) => (err ? reject(err) : resolve(addrs.map((a) => a.address)))));

/** Throws UrlNotAllowed with the end of a sentence ("url …", "it …") saying why this deployment may not connect to the URL. */
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
    throw new UrlNotAllowed(`names host ${host}, which does not resolve`);
  }
  if (!addresses.length) throw new UrlNotAllowed(`names host ${host}, which does not resolve`);
  const bad = addresses.find(isPrivateAddress);
  if (bad) throw new UrlNotAllowed(`names host ${host}, which resolves to a private, loopback or link-local address (${bad})`);
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
  // Port 0 is no port: clients connect to the scheme's default instead of what the URL says.
  if (url.port === '0') throw new UrlNotAllowed('names port 0');
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
      if (bad) return callback(new UrlNotAllowed(`names host ${hostname}, which resolves to a private address (${bad.address})`), '', 0);
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addrs);
      const first = addrs[0];
      if (!first) return callback(new UrlNotAllowed(`names host ${hostname}, which does not resolve`), '', 0);
      callback(null, first.address, first.family);
    });
  };
}
