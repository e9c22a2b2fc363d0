import { createTransport } from 'nodemailer';
import { checkWebhookUrl, UrlNotAllowed, type AddressPolicy } from '@sb/runtime';
import { delivered, failed, type Message, type SendOutcome } from './outcome.js';

/** An SMTP conversation gives up within this long. */
export const SMTP_TIMEOUT_MS = 20_000;

/**
 * One e-mail (text and HTML parts) over the given server: the deployment's SMTP_URL or the owner's own.
 * A 5xx answer (no such mailbox, refused sender, bad credentials) is permanent for this message.
 */
export async function sendEmail(smtpUrl: string, from: string, to: string, m: Message, ownerServer?: AddressPolicy): Promise<SendOutcome> {
  if (ownerServer) {
    // The owner's server is checked again before each use (DNS can change since it was saved).
    try {
      await checkWebhookUrl(smtpUrl, ownerServer, undefined, ['smtp:', 'smtps:']);
    } catch (err) {
      if (err instanceof UrlNotAllowed) return failed(`mail server not allowed: ${err.message}`, true);
      throw err;
    }
  }
  const transport = createTransport({ url: smtpUrl, connectionTimeout: SMTP_TIMEOUT_MS, greetingTimeout: SMTP_TIMEOUT_MS, socketTimeout: SMTP_TIMEOUT_MS });
  try {
    await transport.sendMail({ from, to, subject: m.subject, text: m.text, html: m.html });
    return delivered();
  } catch (err) {
    const e = err as { message?: string; responseCode?: number };
    return failed(e.message || String(err), typeof e.responseCode === 'number' && e.responseCode >= 500 && e.responseCode < 600);
  } finally {
    transport.close();
  }
}
