import { LINK_DOES_NOT_WORK, UNSUBSCRIBE_LINK_UNKNOWN, unsubscribeWords, type UnsubscribeLinkView } from '@sb/contracts/page-words';
import { api, ApiError, h, setBusy, setMain, theirs } from './common.js';

/**
 * The page a browser opening a List-Unsubscribe URL gets: link scanners and mail programs fetch that URL,
 * so only the POST this page sends (the one a mail program's own button sends, RFC 8058) turns anything
 * off. It first asks the same URL as JSON what the link names (the server checks the whole token), so a
 * link that is not ours says so at once, and a good one names the merchant, the plan and the messages.
 */
const token = decodeURIComponent(location.pathname.split('/').filter(Boolean).pop() ?? '');
const path = `/public/unsubscribe/${encodeURIComponent(token)}`;

/** Replaces the page's content and moves the focus there, which a screen reader then reads. */
function show(title: string, ...children: Parameters<typeof setMain>): void {
  document.title = title;
  setMain(h('h1', {}, title), ...children).focus();
}

const badLink = () => show(LINK_DOES_NOT_WORK, h('p', {}, UNSUBSCRIBE_LINK_UNKNOWN));

function ask(link: UnsubscribeLinkView): void {
  const { title, what, button: label } = unsubscribeWords(link, theirs);
  if (!label) {
    show(title, h('p', { id: 'what' }, ...what));
    return;
  }
  const button = h('button', { type: 'submit', id: 'stop' }, label);
  const error = h('p', { class: 'error', id: 'error', role: 'alert' });
  // Always in the page, so screen readers take it as a live region from the start.
  const status = h('p', { class: 'status', id: 'status', role: 'status' });
  const form = h('form', { method: 'post', id: 'form' }, button);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    void stop(button, error, status);
  });
  show(title, h('p', { id: 'what' }, ...what), form, status, error);
}

async function stop(button: HTMLButtonElement, error: HTMLElement, status: HTMLElement): Promise<void> {
  setBusy(button, true);
  error.textContent = '';
  status.textContent = 'Stopping…';
  try {
    // Within the pages' wait (found from outside: a request that got no answer left the button busy, nothing said).
    const body = await api<{ message?: string }>('POST', path, { form: 'List-Unsubscribe=One-Click' });
    show('Done', h('p', { id: 'result' }, body?.message ?? 'You will no longer get these messages.'));
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return badLink();
    setBusy(button, false);
    status.textContent = '';
    error.textContent = err instanceof ApiError ? err.message : 'Something went wrong. Please try again.';
    button.focus();
  }
}

async function main(): Promise<void> {
  try {
    ask(await api<UnsubscribeLinkView>('GET', path));
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      badLink();
      return;
    }
    show(
      'This link could not be checked',
      h('p', { role: 'alert' }, err instanceof ApiError ? err.message : 'Something went wrong.'),
      h('p', {}, h('a', { href: location.href }, 'Try again')),
    );
  }
}

void main();
