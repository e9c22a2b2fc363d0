import { checkWebhookUrl, UrlNotAllowed, type AddressPolicy, type Resolve } from '@sb/runtime';
import type { NotificationSettingsUpdate } from '@sb/contracts';

/**
 * Owners name mail servers and relays this deployment then connects to from inside: like webhook URLs,
 * they must not be private, loopback or link-local addresses (unless WEBHOOK_ALLOW_PRIVATE). Answers the
 * refused fields as [location, sentence].
 */
export async function refusedAddresses(body: NotificationSettingsUpdate, policy: AddressPolicy, resolve?: Resolve): Promise<[(string | number)[], string][]> {
  const out: [(string | number)[], string][] = [];
  const check = async (url: string, protocols: string[], loc: (string | number)[], what: string) => {
    try {
      await checkWebhookUrl(url, policy, resolve, protocols);
    } catch (err) {
      if (!(err instanceof UrlNotAllowed)) throw err;
      out.push([loc, `${what} ${err.message}`]);
    }
  };
  const smtp = body.channels.email?.smtp_url;
  if (smtp) await check(smtp, ['smtp:', 'smtps:'], ['channels', 'email', 'smtp_url'], 'smtp_url');
  for (const [i, relay] of (body.channels.nostr?.relays ?? []).entries()) await check(relay, ['ws:', 'wss:'], ['channels', 'nostr', 'relays', i], 'relay');
  return out;
}
