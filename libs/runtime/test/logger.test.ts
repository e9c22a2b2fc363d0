import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../src/logger.js';

function capture() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l));
      done();
    },
  });
  return { lines, log: createLogger('test', 'info', stream) };
}

describe('service logs', () => {
  it('never carry a key, token or secret header, and leave the logged objects as they were', () => {
    const { lines, log } = capture();
    const wallet = { id: 'wal_1', admin_key: 'adm_secret1', invoice_key: 'inv_secret2' };
    const req = { method: 'GET', headers: { 'x-api-key': 'adm_secret3', 'x-subscriber-token': 'sub_secret4', authorization: 'Bearer secret5', accept: '*/*' } };
    const nwc = { access_token: 'secret6', relay: 'wss://relay' };
    log.info({ wallet, req, nwc, note: 'kept' }, 'with secrets');
    const line = JSON.stringify(lines[0]);
    for (const s of ['secret1', 'secret2', 'secret3', 'secret4', 'secret5', 'secret6']) expect(line).not.toContain(s);
    expect(lines[0]).toMatchObject({
      msg: 'with secrets',
      note: 'kept',
      wallet: { id: 'wal_1', admin_key: '[redacted]', invoice_key: '[redacted]' },
      req: { method: 'GET', headers: { 'x-api-key': '[redacted]', 'x-subscriber-token': '[redacted]', authorization: '[redacted]', accept: '*/*' } },
      nwc: { access_token: '[redacted]', relay: 'wss://relay' },
    });
    // The caller's objects keep their values.
    expect(wallet.admin_key).toBe('adm_secret1');
    expect(req.headers['x-api-key']).toBe('adm_secret3');
    expect(nwc.access_token).toBe('secret6');
  });

  it('write a line without secrets as it is', () => {
    const { lines, log } = capture();
    const err = new Error('boom');
    log.warn({ consumer: 'notifier', event_id: 'evt_1', result: { deliveries: 0 }, list: [1, 2], err }, 'event handled');
    expect(lines[0]).toMatchObject({
      level: 40,
      service: 'test',
      consumer: 'notifier',
      event_id: 'evt_1',
      result: { deliveries: 0 },
      list: [1, 2],
      msg: 'event handled',
    });
    expect((lines[0]!.err as { message: string }).message).toBe('boom');
  });
});
