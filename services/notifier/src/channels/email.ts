import { createTransport } from 'nodemailer';
import type SMTPTransport from 'nodemailer/lib/smtp-transport/index.js';
import { parseMailbox } from '@sb/contracts';
import { checkWebhookUrl, UrlNotAllowed, type AddressPolicy } from '@sb/runtime';
import { delivered, failed, type Message, type SendOutcome } from './outcome.js';

/**
 * Nodemailer's codes of a server not reached (refused, timed out, unknown name, TLS failed): their messages
 * name its host and port. Others ("No recipients defined") are about the message and say so as they are.
 */
const CONNECTION_CODES = new Set(['ECONNECTION', 'ESOCKET', 'ETIMEDOUT', 'EDNS', 'ETLS', 'ECONNREFUSED']);

/** This machine, by name or address: a mail server here is reached without crossing a network. */
const LOOPBACK = /^(localhost|.+\.localhost|127(\.\d{1,3}){3}|::1)$/i;

/** An SMTP conversation gives up within this long. */
export const SMTP_TIMEOUT_MS = 20_000;
/**
 * The longest one e-mail may take in all: the timeouts above bound each wait, not a server that answers
 * every step slowly (or sends continuation lines for ever), which kept a send going past its claim on the
 * message, which was then sent again (found in review). Well inside that claim (see notificationWorker).
 */
export const SMTP_SEND_DEADLINE_MS = 3 * SMTP_TIMEOUT_MS;

/** The sender of one mail: From, and where replies go when that is someone else. */
export interface Sender {
  from: string | { name: string; address: string };
  replyTo?: string;
}

/**
 * Who a mail is from. Through the owner's own server, their `from` as it is. Through the deployment's
 * server, always its MAIL_FROM address (no owner can send as anyone through it): the owner's `from` gives
 * the display name (else the merchant name) and, as Reply-To, where answers go.
 */
export function senderFor(serverFrom: string, ownerFrom: string | null, merchantName: string | null, ownServer: boolean): Sender {
  if (ownServer) return { from: ownerFrom ?? serverFrom };
  const server = parseMailbox(serverFrom);
  if (!server) return { from: serverFrom };
  const owner = ownerFrom ? parseMailbox(ownerFrom) : undefined;
  const name = owner?.name || merchantName || server.name;
  return { from: { name, address: server.address }, ...(owner && owner.address !== server.address ? { replyTo: owner.address } : {}) };
}

/**
 * The transport for a mail server URL, built from its parts only: given as `url`, nodemailer would also
 * read transport options from the query string (sendmail with any program, logging, a proxy).
 */
export function smtpOptions(smtpUrl: string): SMTPTransport.Options {
  const u = new URL(smtpUrl);
  if ((u.protocol !== 'smtp:' && u.protocol !== 'smtps:') || !u.hostname) throw new Error('not an smtp:// or smtps:// URL');
  const secure = u.protocol === 'smtps:';
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  return {
    host,
    port: u.port ? Number(u.port) : secure ? 465 : 587,
    secure,
    ...(u.username ? { auth: { user: decodeURIComponent(u.username), pass: decodeURIComponent(u.password) } } : {}),
    // A login goes to another machine only encrypted: STARTTLS is required of it (a server that does not
    // offer it, or an offer stripped on the way, fails the send instead of sending the password in clear).
    // Without a login (a relay in the cluster) and on loopback, STARTTLS is used when offered.
    ...(u.username && !secure && !LOOPBACK.test(host) ? { requireTLS: true } : {}),
    connectionTimeout: SMTP_TIMEOUT_MS,
    greetingTimeout: SMTP_TIMEOUT_MS,
    socketTimeout: SMTP_TIMEOUT_MS,
  };
}

/**
 * One e-mail (text and HTML parts) over the given server: the deployment's SMTP_URL or the owner's own.
 * A 5xx answer (no such mailbox, refused sender, bad credentials) is permanent for this message.
 */
export async function sendEmail(
  smtpUrl: string,
  from: Sender,
  to: string,
  m: Message,
  ownerServer?: AddressPolicy,
  onServiceServerDown?: (detail: string) => void,
  deadlineMs = SMTP_SEND_DEADLINE_MS,
): Promise<SendOutcome> {
  if (ownerServer) {
    // The owner's server is checked again before each use (DNS can change since it was saved).
    try {
      await checkWebhookUrl(smtpUrl, ownerServer, undefined, ['smtp:', 'smtps:']);
    } catch (err) {
      if (err instanceof UrlNotAllowed) return failed(`mail server not allowed: it ${err.message}`, true);
      throw err;
    }
  }
  let options: SMTPTransport.Options;
  try {
    options = smtpOptions(smtpUrl);
  } catch {
    return failed('the mail server address is not a valid smtp:// or smtps:// URL', true);
  }
  const transport = createTransport(options);
  const signal = AbortSignal.timeout(deadlineMs);
  try {
    // RFC 2369 / 8058: mail providers offer their own unsubscribe button and POST this URL when pressed.
    const headers = m.unsubscribe ? { 'List-Unsubscribe': `<${m.unsubscribe}>`, 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click' } : undefined;
    await transport.sendMail({ ...from, to, subject: m.subject, text: m.text, html: m.html, ...(headers ? { headers } : {}), signal });
    return delivered();
  } catch (err) {
    if (signal.aborted) return failed(`the mail server did not take the message within ${deadlineMs / 1000} seconds`);
    const e = err as { message?: string; responseCode?: number; code?: string };
    const detail = e.message || String(err);
    if (!ownerServer && e.responseCode === undefined && CONNECTION_CODES.has(e.code ?? '')) {
      // The deployment's server is the operator's: its host and port ("connect ECONNREFUSED 10.0.3.7:25")
      // are not the owner's to read in their notification log. The operator reads them in the log.
      onServiceServerDown?.(detail);
      return failed(`the service's mail server could not be reached (${e.code})`);
    }
    const permanent = typeof e.responseCode === 'number' && e.responseCode >= 500 && e.responseCode < 600;
    if (options.requireTLS && /STARTTLS/i.test(detail)) {
      // The operator's server: theirs to fix (their log says so), and the mail goes out once they have.
      if (!ownerServer) {
        onServiceServerDown?.(detail);
        return failed("the service's mail server did not take STARTTLS, which its login requires");
      }
      return failed(
        `the mail server did not take STARTTLS, which a login sent to another machine requires (smtps:// for TLS from the start): ${detail}`,
        permanent,
      );
    }
    return failed(detail, permanent);
  } finally {
    transport.close();
  }
}
