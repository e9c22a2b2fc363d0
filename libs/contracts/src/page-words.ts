/**
 * Words a hosted page (web/src) shows and the gateway also writes itself, for a browser that gets its
 * page of words (an address naming nothing, a form posted without JavaScript): one text, so the two
 * never say different things. No zod here: the pages' scripts import this module alone
 * (`@sb/contracts/page-words`), which keeps the schemas out of their bundles.
 */

/** A checkout link whose plan does not exist, or that names none. */
export const PLAN_NOT_FOUND = 'Plan not found';
/** Below PLAN_NOT_FOUND when the address names no plan at all. */
export const NO_PLAN_NAMED = 'This checkout link names no plan. Please ask the seller for the right link.';
/** Below PLAN_NOT_FOUND when the plan named does not exist, or is archived or deleted. */
export const PLAN_NOT_OFFERED = 'This plan does not exist or is no longer offered. Please ask the seller for a current link.';
/**
 * The 409 for a contact that already has a live subscription of the plan: paid, or an unpaid checkout that
 * cannot be replaced (on-chain, NWC, a resume). One sentence for both: anyone can type someone's address,
 * and a detail that differed would tell them whether that person has paid. It helps the honest subscriber
 * either way. The checkout page tells it from other conflicts (a concurrent change) by these words.
 */
export const ALREADY_SUBSCRIBED =
  "This contact already has a subscription or a checkout of this plan. If it was paid, its link to manage it was shown when it started (and is in the seller's messages about it, if any); if not, it stays open until it is paid or expires, within 24 hours of its start";

/** The 409 for a retry (same Idempotency-Key) of a request still being handled: the checkout page asks the person to try again in a moment. */
export const STILL_IN_PROGRESS = 'A request with this Idempotency-Key is still in progress';

/** A subscriber's link (portal, List-Unsubscribe) that is not one we sent, or no longer works. */
export const LINK_DOES_NOT_WORK = 'This link does not work';
/** Below LINK_DOES_NOT_WORK on the List-Unsubscribe page. */
export const UNSUBSCRIBE_LINK_UNKNOWN =
  'The link is not one we sent, or it was changed on the way. Use your subscription portal to choose which messages you get.';

/**
 * After a List-Unsubscribe link turned `what` off (page and service answer alike): the way back, naming
 * what it turns on (found from outside: "them" read as the cancellation notices), and what still comes.
 */
export const turnBackOn = (what: string) =>
  `To get ${what} again, turn them back on in your subscription portal (its link is in every message about this subscription). Cancellation notices are still sent.`;

/** What a List-Unsubscribe link names, as its GET answers (UnsubscribeLink). */
export interface UnsubscribeLinkView {
  kind: 'reminders' | 'confirmations';
  plan_name: string;
  merchant_name: string | null;
  receiving: boolean;
  /** Cancelled or expired: nothing more is sent, nothing to stop (absent from an older billing). */
  ended?: boolean;
}

/** `off` is what stops, followed by the subscription it is for, then `which` of them and `after`. */
const UNSUBSCRIBE_KINDS: Record<UnsubscribeLinkView['kind'], { title: string; which: string; after: string; button: string; off: string }> = {
  reminders: {
    title: 'Stop payment reminders?',
    which: '(renewal due, trial ending, payment overdue)',
    after: '',
    button: 'Stop reminders',
    off: 'reminders',
  },
  confirmations: {
    title: 'Stop confirmations and receipts?',
    which: '(subscription started, payment received)',
    after: ' The receipts stay in your subscription portal.',
    button: 'Stop confirmations',
    off: 'confirmations and receipts',
  },
};

/**
 * The List-Unsubscribe page's words for a link, for its script and for the gateway's page without
 * JavaScript alike (found from outside: that one said "one kind of message about one subscription"): its
 * title, its sentence (the seller's names through `name`, which keeps their own direction), and its
 * button (null: nothing is left to stop).
 */
export function unsubscribeWords<T>(link: UnsubscribeLinkView, name: (text: string) => T): { title: string; what: Array<string | T>; button: string | null } {
  const words = UNSUBSCRIBE_KINDS[link.kind];
  const subscription = [link.plan_name ? name(link.plan_name) : 'this subscription', ...(link.merchant_name ? [' from ', name(link.merchant_name)] : [])];
  // An ended subscription's portal has no switches: nothing there turns them back on (found from outside:
  // the page said it could).
  const ended = ' Your subscription to it has ended.';
  if (!link.receiving) {
    const after = link.ended ? `.${ended}` : '. Your subscription portal can turn them back on: its link is in every message about this subscription.';
    return { title: 'Already stopped', what: [`You no longer get ${words.off} for `, ...subscription, after], button: null };
  }
  const turnBack = link.ended ? ended : ` ${turnBackOn(words.off)}`;
  return {
    title: words.title,
    what: [`You will no longer get ${words.off} for `, ...subscription, ` ${words.which}.${link.ended ? '' : words.after}${turnBack}`],
    button: words.button,
  };
}

/**
 * A checkout for an e-mail address already known (a returning subscriber): the contact details given with
 * it are not stored, since anyone can type someone's address (found from outside: dropped without a word).
 * The checkout's answers and page say so alike.
 */
export const CONTACTS_UNCHANGED =
  "This e-mail address is known here already: the contact details stored with it are kept, and the others you gave were not added. You can change them in your subscription portal (its link was shown when you first subscribed, and is in the seller's messages).";

/** Whether a checkout's answer says CONTACTS_UNCHANGED: no portal link (the subscriber existed) and contact details besides the e-mail. */
export const contactsUnchanged = (
  body: { name?: string | undefined; messenger?: string | undefined; nostr?: string | undefined; contact_preference?: string | undefined },
  manageUrl: string | null | undefined,
): boolean => !manageUrl && [body.name, body.messenger, body.nostr, body.contact_preference].some((v) => v !== undefined);
