import type { PGlite } from '@electric-sql/pglite';

export function servePglite(db: PGlite, opts: { port: number; host?: string }): Promise<{ port: number; stop(): Promise<void> }>;
