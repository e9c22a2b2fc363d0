import { AbstractSimplePool } from 'nostr-tools/abstract-pool';
import { verifyEvent } from 'nostr-tools/pure';
import WebSocket from 'ws';

/** What `quietErrors` needs of a WebSocket class: an EventEmitter-style `on('error')` (the `ws` package's). */
// biome-ignore lint/suspicious/noExplicitAny: TypeScript's mixin pattern requires a constructor of any[].
type EmitsErrors = new (...args: any[]) => { on(event: 'error', listener: (err: Error) => void): unknown };

/**
 * The WebSocket class with an 'error' listener on every socket. nostr-tools' relay timeout closes a socket
 * still connecting after clearing its `onerror`, and `ws` then emits 'error' with nobody listening: an
 * uncaught exception that ended the process (a relay that accepts TCP and never answers the handshake was
 * enough, from an unauthenticated request). The library still sees the failure through `onclose`.
 */
export function quietErrors<T extends EmitsErrors>(Base: T): T {
  return class extends Base {
    // biome-ignore lint/suspicious/noExplicitAny: as above.
    constructor(...args: any[]) {
      super(...args);
      this.on('error', () => undefined);
    }
  };
}

/**
 * An event check for a relay pool that checks at most `perRelay` events of each relay and refuses the
 * rest unchecked. Checking a signature takes about a millisecond: a relay of anyone's choosing (named in
 * a connection string or a contact) that floods a subscription with events of the right kind and author
 * but forged signatures would otherwise hold the event loop for as many milliseconds. One per operation
 * (per pool): the answers that matter are one or two events.
 */
export function boundedPerRelay<E>(verify: (e: E) => boolean, perRelay = 20): (e: E, url?: string) => boolean {
  const checked = new Map<string, number>();
  return (e, url = '') => {
    const n = checked.get(url) ?? 0;
    if (n >= perRelay) return false;
    checked.set(url, n + 1);
    return verify(e);
  };
}

const QuietWebSocket = quietErrors(WebSocket);

/**
 * A Nostr relay pool for one operation (NWC's and the notifier's): sockets that cannot end the process
 * (`quietErrors`), and at most 20 events checked per relay (`boundedPerRelay`). Node 20 has no global
 * WebSocket, so the implementation is given here.
 */
export function relayPool(): AbstractSimplePool {
  return new AbstractSimplePool({
    verifyEvent: boundedPerRelay(verifyEvent),
    // The `ws` class is the one nostr-tools documents for Node; its types are the DOM's.
    websocketImplementation: QuietWebSocket as unknown as typeof globalThis.WebSocket,
    maxWaitForConnection: 3000,
  });
}
