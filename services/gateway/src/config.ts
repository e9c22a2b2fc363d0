import { z } from 'zod';
import { commonConfig, envInt, envPort, loadConfig } from '@sb/runtime';

export const gatewayConfig = {
  ...commonConfig,
  PORT: envPort(8080),
  HOST: z.string().default('0.0.0.0'),
  PUBLIC_BASE_URL: z.string().url().optional(),
  BUS_TIMEOUT_MS: envInt(5000, 100),
  RATE_LIMIT_KEY_PER_SECOND: envInt(100, 1),
  RATE_LIMIT_PUBLIC_POST_PER_MINUTE: envInt(30, 1),
  RATE_LIMIT_PUBLIC_GET_PER_MINUTE: envInt(600, 1),
  KEY_CACHE_TTL_MS: envInt(5000, 0),
  /**
   * How long a client may take to send its whole request (the headers within 20 s at most): one that
   * trickles it in is answered 408 and its connection closed, instead of holding it for Node's 300 s.
   * The answer's own time (an NWC checkout waits up to 75 s for the wallet) is not counted.
   */
  HTTP_REQUEST_TIMEOUT_MS: envInt(30_000, 1000),
  /**
   * How many proxies (ingress, load balancer) stand in front of the gateway: the client address is the
   * one the outermost of them saw, read from X-Forwarded-For counting from the right, so a client cannot
   * pick its own by sending the header. 0: the TCP peer is the client.
   */
  TRUST_PROXY: envInt(0),
  SECRETS_KEY: z.string().regex(/^[0-9a-fA-F]{64}$/, '32 bytes of hex (64 characters): seals responses kept for Idempotency-Key replays'),
  /** The built hosted pages (checkout, portal, API reference); default: web/dist of this checkout. */
  WEB_DIR: z.string().min(1).optional(),
};
export const loadGatewayConfig = () => loadConfig(gatewayConfig);
