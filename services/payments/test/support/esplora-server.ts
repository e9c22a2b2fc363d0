import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { address as btcAddress, networks } from 'bitcoinjs-lib';

/** A transaction as Esplora's REST API answers it (`GET /tx/:txid` and the address listings). */
export interface EsploraTx {
  txid: string;
  version: number;
  locktime: number;
  vin: {
    txid: string;
    vout: number;
    prevout: EsploraVout;
    scriptsig: string;
    scriptsig_asm: string;
    witness: string[];
    is_coinbase: boolean;
    sequence: number;
  }[];
  vout: EsploraVout[];
  size: number;
  weight: number;
  fee: number;
  status: { confirmed: false } | { confirmed: true; block_height: number; block_hash: string; block_time: number };
}

interface EsploraVout {
  scriptpubkey: string;
  scriptpubkey_asm: string;
  scriptpubkey_type: string;
  scriptpubkey_address: string;
  value: number;
}

export interface EsploraRequest {
  path: string;
  headers: IncomingHttpHeaders;
  at: number;
}

export interface EsploraServer {
  url: string;
  requests: EsploraRequest[];
  /** The next answers fail with this status (Esplora's errors are plain text), or come this late. */
  faults: { status?: number; delayMs?: number };
  readonly tip: number;
  /** Broadcasts a transaction paying `sats` to `address` (plus change elsewhere); it sits in the mempool until mined. */
  pay(address: string, sats: number): string;
  /** Mines `n` blocks; the first takes every mempool transaction. */
  mine(n?: number): void;
  close(): Promise<void>;
}

/** Esplora lists this many confirmed transactions per page. */
const CHAIN_PAGE = 25;

const hex = (n: number) => randomBytes(n).toString('hex');

/**
 * A local Esplora (Blockstream's esplora / electrs REST API), the part a payment watcher uses:
 * `GET /address/:address/txs` (mempool transactions, newest first, then the newest 25 confirmed),
 * `GET /address/:address/txs/chain/:last_seen_txid` (the next 25 confirmed) and
 * `GET /blocks/tip/height` (plain text). Addresses are checked for the server's network as Esplora does
 * ("Invalid Bitcoin address", 400).
 */
export async function startEsploraServer(network: 'mainnet' | 'testnet' = 'mainnet', startHeight = 800_000): Promise<EsploraServer> {
  const net = network === 'mainnet' ? networks.bitcoin : networks.testnet;
  const changeAddress = network === 'mainnet' ? 'bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4' : 'tb1qw508d6qejxtdg4y5r3zarvary0c5xw7kxpjzsx';
  const requests: EsploraRequest[] = [];
  const faults: EsploraServer['faults'] = {};
  const txs: EsploraTx[] = []; // oldest first
  let tip = startHeight;

  const output = (addr: string, value: number): EsploraVout => {
    const script = Buffer.from(btcAddress.toOutputScript(addr, net));
    return {
      scriptpubkey: script.toString('hex'),
      scriptpubkey_asm: `OP_0 OP_PUSHBYTES_${script.length - 2} ${script.subarray(2).toString('hex')}`,
      scriptpubkey_type: script.length === 22 ? 'v0_p2wpkh' : 'v0_p2wsh',
      scriptpubkey_address: addr,
      value,
    };
  };
  const validAddress = (a: string) => {
    try {
      btcAddress.toOutputScript(a, net);
      return true;
    } catch {
      return false;
    }
  };
  const pays = (t: EsploraTx, a: string) => t.vout.some((o) => o.scriptpubkey_address === a) || t.vin.some((i) => i.prevout.scriptpubkey_address === a);
  const confirmedNewestFirst = (a: string) =>
    txs
      .filter((t) => t.status.confirmed && pays(t, a))
      .reverse()
      .sort((x, y) => (y.status as { block_height: number }).block_height - (x.status as { block_height: number }).block_height);

  const answer = (path: string): { status: number; type: 'json' | 'text'; body: unknown } => {
    if (path === '/blocks/tip/height') return { status: 200, type: 'text', body: String(tip) };
    const m = /^\/address\/([^/]+)\/txs(?:\/chain(?:\/([0-9a-f]{64}))?)?$/.exec(path);
    if (!m) return { status: 404, type: 'text', body: 'Not Found' };
    const a = decodeURIComponent(m[1]!);
    if (!validAddress(a)) return { status: 400, type: 'text', body: 'Invalid Bitcoin address' };
    const confirmed = confirmedNewestFirst(a);
    if (!path.includes('/chain')) {
      const mempool = txs.filter((t) => !t.status.confirmed && pays(t, a)).reverse();
      return { status: 200, type: 'json', body: [...mempool.slice(0, 50), ...confirmed.slice(0, CHAIN_PAGE)] };
    }
    const after = m[2] ? confirmed.findIndex((t) => t.txid === m[2]) + 1 : 0;
    return { status: 200, type: 'json', body: after === 0 && m[2] ? [] : confirmed.slice(after, after + CHAIN_PAGE) };
  };

  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      const path = (req.url ?? '/').split('?')[0]!;
      requests.push({ path, headers: req.headers, at: Date.now() });
      if (faults.delayMs) await new Promise((r) => setTimeout(r, faults.delayMs));
      if (res.destroyed) return;
      if (req.method !== 'GET') {
        res.writeHead(405, { 'content-type': 'text/plain' }).end('Method Not Allowed');
        return;
      }
      if (faults.status) {
        res.writeHead(faults.status, { 'content-type': 'text/plain' }).end('Internal Server Error');
        return;
      }
      const out = answer(path);
      if (out.type === 'json') res.writeHead(out.status, { 'content-type': 'application/json' }).end(JSON.stringify(out.body));
      else res.writeHead(out.status, { 'content-type': 'text/plain' }).end(out.body as string);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));

  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    faults,
    get tip() {
      return tip;
    },
    pay(addr, sats) {
      if (!validAddress(addr)) throw new Error(`not a ${network} address: ${addr}`);
      const fee = 141 * 2;
      const input = 1_000_000 + sats + fee;
      const tx: EsploraTx = {
        txid: hex(32),
        version: 2,
        locktime: 0,
        vin: [
          {
            txid: hex(32),
            vout: 0,
            prevout: output(changeAddress, input),
            scriptsig: '',
            scriptsig_asm: '',
            witness: [hex(71), hex(33)],
            is_coinbase: false,
            sequence: 0xfffffffd,
          },
        ],
        vout: [output(addr, sats), output(changeAddress, input - sats - fee)],
        size: 222,
        weight: 561,
        fee,
        status: { confirmed: false },
      };
      txs.push(tx);
      return tx.txid;
    },
    mine(n = 1) {
      for (let i = 0; i < n; i++) {
        tip += 1;
        const block = { confirmed: true as const, block_height: tip, block_hash: hex(32), block_time: Math.floor(Date.now() / 1000) };
        for (const t of txs) if (!t.status.confirmed) t.status = block;
      }
    },
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
