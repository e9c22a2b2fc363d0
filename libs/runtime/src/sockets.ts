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
