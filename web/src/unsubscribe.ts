import { ApiError, errorText, h, setMain } from './common.js';

/**
 * The page a GET of a List-Unsubscribe URL answers: link scanners and mail programs fetch that URL, so
 * only the POST this page sends (the one a mail program's own button sends, RFC 8058) turns anything off.
 * The token's middle part names the kind of message; the server checks the whole token.
 */
const kind = decodeURIComponent(location.pathname.split('/').filter(Boolean).pop() ?? '').split('.')[1];
const WORDS: Record<string, { title: string; what: string; button: string }> = {
  reminders: {
    title: 'Stop payment reminders?',
    what: 'You will no longer get reminders (renewal due, trial ending, payment overdue) for this subscription. Cancellation notices are still sent, and your subscription portal can turn reminders back on.',
    button: 'Stop reminders',
  },
  confirmations: {
    title: 'Stop confirmations and receipts?',
    what: 'You will no longer get confirmations and receipts for this subscription; the receipts stay in your subscription portal. Cancellation notices are still sent, and the portal can turn them back on.',
    button: 'Stop confirmations',
  },
};

const words = kind ? WORDS[kind] : undefined;
const form = document.getElementById('form') as HTMLFormElement;
const button = document.getElementById('stop') as HTMLButtonElement;
const error = document.getElementById('error')!;
if (words) {
  document.title = words.title;
  document.getElementById('title')!.textContent = words.title;
  document.getElementById('what')!.textContent = words.what;
  button.textContent = words.button;
}

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  button.disabled = true;
  error.textContent = '';
  try {
    const res = await fetch(location.pathname, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
      body: 'List-Unsubscribe=One-Click',
    }).catch(() => {
      throw new ApiError(0, 'Could not reach the server. Check your connection and try again.');
    });
    const body = (await res.json().catch(() => undefined)) as { message?: string } | undefined;
    if (res.status === 404) {
      document.title = 'This link does not work';
      const main = setMain(
        h('h1', {}, 'This link does not work'),
        h('p', {}, 'The link is not one we sent, or it was changed on the way. Use your subscription portal to choose which messages you get.'),
      );
      return void main.focus();
    }
    if (!res.ok) throw new ApiError(res.status, errorText(res.status, body));
    document.title = 'Done';
    const main = setMain(h('h1', {}, 'Done'), h('p', { id: 'result' }, body?.message ?? 'You will no longer get these messages.'));
    // The page changed under the focus: move it to the result, which a screen reader then reads.
    main.focus();
  } catch (err) {
    button.disabled = false;
    error.textContent = err instanceof ApiError ? err.message : 'Something went wrong. Please try again.';
    button.focus();
  }
});
