import type { NWCErrorCode } from '@sb/contracts';

/**
 * Why a connection must not be asked to pay `amount_sats` at all (null: ask the wallet): a deactivated
 * connection, or an amount above the limit the subscriber gave it.
 */
export function chargeRefusal(
  conn: { is_active: boolean; max_amount_sats?: number | null },
  amountSats: number,
): { code: NWCErrorCode; message: string } | null {
  if (!conn.is_active) return { code: 'UNAUTHORIZED', message: 'The wallet connection is no longer active' };
  if (conn.max_amount_sats !== null && conn.max_amount_sats !== undefined && amountSats > conn.max_amount_sats) {
    return { code: 'QUOTA_EXCEEDED', message: `The payment of ${amountSats} sats is above this connection's limit of ${conn.max_amount_sats} sats` };
  }
  return null;
}
