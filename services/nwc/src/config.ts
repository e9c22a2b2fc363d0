import { z } from 'zod';
import { commonConfig, envBool, envInt, envPort, loadConfig } from '@sb/runtime';

export const loadNwcConfig = () =>
  loadConfig({
    ...commonConfig,
    NWC_OPS_PORT: envPort(9103),
    SECRETS_KEY: z.string().regex(/^[0-9a-fA-F]{64}$/, '32 bytes of hex (64 characters): encrypts wallet connection secrets at rest'),
    BUS_TIMEOUT_MS: envInt(5000, 100),
    /** How long a wallet's relays get to deliver its info event (kind 13194) when a connection string is checked. */
    NWC_INFO_TIMEOUT_MS: envInt(10_000, 100),
    /** How long a wallet gets to answer a pay_invoice request; then the attempt counts as failed (OTHER). */
    NWC_REPLY_TIMEOUT_MS: envInt(30_000, 100),
    /** How often paid charges whose preimage the payments service could not take yet are confirmed again (and old attempts pruned). */
    NWC_SWEEP_INTERVAL_MS: envInt(15_000, 100),
    /** Relays may be loopback or private addresses (local development and tests only). */
    NWC_ALLOW_PRIVATE_RELAYS: envBool,
  });
