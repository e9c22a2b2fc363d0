import type { UnsubscribeKind } from '@sb/contracts';
import type { SecretBox } from '@sb/runtime';

/** The subscription setting each kind of one-click unsubscribe turns off. */
export const OPT_IN_OF: Record<UnsubscribeKind, 'receive_reminders' | 'receive_confirmations'> = {
  reminders: 'receive_reminders',
  confirmations: 'receive_confirmations',
};

const PURPOSE = 'list-unsubscribe';
const KINDS = Object.keys(OPT_IN_OF) as UnsubscribeKind[];

/**
 * The token of a List-Unsubscribe URL: `<subscription id>.<kind>.<MAC>`. Mail providers store and fetch
 * these URLs, so it can do one thing only (turn that kind of notice off for that subscription), unlike
 * the portal token; it needs no storage and stays valid across a SECRETS_KEY rotation while the old key
 * is in SECRETS_KEY_PREVIOUS.
 */
export function unsubscribeToken(secrets: SecretBox, subscriptionId: string, kind: UnsubscribeKind): string {
  return `${subscriptionId}.${kind}.${secrets.sign(PURPOSE, `${subscriptionId}\n${kind}`)}`;
}

/** The subscription and kind a token names, when the server signed it; undefined for anything else. */
export function readUnsubscribeToken(secrets: SecretBox, token: string): { subscriptionId: string; kind: UnsubscribeKind } | undefined {
  const m = /^([A-Za-z0-9_]{1,64})\.([a-z]+)\.([A-Za-z0-9_-]{43})$/.exec(token);
  if (!m) return undefined;
  const [, subscriptionId, kind, mac] = m as unknown as [string, string, UnsubscribeKind, string];
  if (!KINDS.includes(kind) || !secrets.verify(PURPOSE, `${subscriptionId}\n${kind}`, mac)) return undefined;
  return { subscriptionId, kind };
}
