import { storableText } from '@sb/contracts';

/** The result of one send through a channel, as the attempt log records it. */
export interface SendOutcome {
  delivered: boolean;
  /** What went wrong, in the provider's words; never a secret. */
  error: string | null;
  /** Sending again cannot help (unknown chat, bot blocked, no such mailbox, no such key). */
  permanent: boolean;
  /** The provider asked to wait this long before the next try (Telegram's 429 retry_after). */
  retryAfterS?: number;
}

export const delivered = (): SendOutcome => ({ delivered: true, error: null, permanent: false });
export const failed = (error: string, permanent = false, retryAfterS?: number): SendOutcome => ({
  delivered: false,
  error: storableText(error, 500),
  permanent,
  ...(retryAfterS !== undefined ? { retryAfterS } : {}),
});

/** A rendered message: every channel sends the text; e-mail adds the subject and the HTML part. */
export interface Message {
  subject: string;
  text: string;
  html: string;
  /**
   * The one-click unsubscribe URL (RFC 8058) of the kind of notice this is; e-mail sends it as
   * List-Unsubscribe. None on notices that are always sent (cancellation, plan archive, expiry).
   */
  unsubscribe?: string;
}
