// The API reference: our own OpenAPI document (generated from the zod contracts) rendered by Swagger UI,
// bundled here so the page needs nothing from another site.
import SwaggerUIBundle from 'swagger-ui-dist/swagger-ui-bundle.js';
import 'swagger-ui-dist/swagger-ui.css';
import './docs.css';

// Served at {api}/docs, beside {api}/openapi.json.
const specUrl = location.pathname.replace(/\/docs\/?$/, '/openapi.json');

SwaggerUIBundle({
  url: specUrl,
  dom_id: '#reference',
  // Deep links put a link inside each operation's toggle button (a control nested in a control).
  deepLinking: false,
  // The service's own pages and those of anyone it links to: no calls to a validator elsewhere.
  validatorUrl: null,
  tryItOutEnabled: false,
  defaultModelsExpandDepth: 0,
  docExpansion: 'list',
});

/**
 * What Swagger UI's markup leaves out for screen readers, added as it renders (attributes only: React
 * keeps managing the elements). Its title block and server bar sit outside any landmark, so they get
 * one each; its headings skip levels (h1 title, then h3 tags with h4 sections, h2 Webhooks, h4
 * Schemas), so those inside its <main> are announced one level up and Schemas beside Webhooks,
 * giving the outline h1 > h2 tag > h3 section; some of its controls have no name.
 */
const fixes: [selector: string, attributes: Record<string, string>][] = [
  ['.information-container', { role: 'banner' }],
  ['.scheme-container', { role: 'region', 'aria-label': 'Server and authorization' }],
  ['select#servers', { 'aria-label': 'Server' }],
  // A schema without a title (a response's own) gets a toggle with only an arrow in it.
  ['.json-schema-2020-12-accordion:has(> .json-schema-2020-12-accordion__children:empty)', { 'aria-label': 'Schema' }],
  ['main .models > h4', { 'aria-level': '2' }],
  ...[3, 4, 5, 6].map((n): [string, Record<string, string>] => [`main h${n}`, { 'aria-level': String(n - 1) }]),
];
function fix() {
  for (const [selector, attributes] of fixes) {
    const first = Object.keys(attributes)[0];
    let found: NodeListOf<Element>;
    try {
      found = document.querySelectorAll(`${selector}:not([${first}])`);
    } catch {
      continue; // a browser without `:has()`: that one fix is skipped, not the ones after it
    }
    for (const el of found) {
      for (const [name, value] of Object.entries(attributes)) el.setAttribute(name, value);
    }
  }
}

/**
 * The reference is hundreds of focus stops long (found from outside: about 370 before the last tag's
 * operations): a list of its sections before it, each link taking the focus to that section's heading,
 * from where Tab goes on inside it. Drawn once Swagger UI has drawn its tags, outside what React manages.
 */
function sectionsNav(): void {
  if (document.getElementById('sections')) return;
  const tags = [...document.querySelectorAll<HTMLElement>('#reference h3.opblock-tag[id]')];
  if (!tags.length) return;
  const more = [document.querySelector<HTMLElement>('#reference .webhooks > h2'), document.querySelector<HTMLElement>('#reference section.models > h4')];
  const targets = [...tags, ...more.filter((t): t is HTMLElement => t !== null)];
  const list = document.createElement('ul');
  for (const [i, target] of targets.entries()) {
    target.id ||= `section-${i}`;
    const link = document.createElement('a');
    link.href = `#${target.id}`;
    link.textContent = target.dataset.tag ?? target.textContent?.trim() ?? '';
    link.addEventListener('click', (e) => {
      e.preventDefault();
      // A heading takes the focus (and is read out) only with a tabindex; Tab goes on from it.
      target.setAttribute('tabindex', '-1');
      target.focus();
    });
    const item = document.createElement('li');
    item.append(link);
    list.append(item);
  }
  const nav = document.createElement('nav');
  nav.id = 'sections';
  nav.setAttribute('aria-label', 'Sections of the reference');
  nav.append(list);
  document.getElementById('reference')!.before(nav);
}

/**
 * Swagger UI's Authorize pop-up made a modal dialog (found from outside: no dialog role, the focus put in
 * its last key field, Tab leaving it for the page behind, a close button without a name, its key fields
 * sharing one id, so the first was named "Value:" three times and the others not at all, and the focus
 * lost when it closed). Attributes and focus only: React keeps managing its elements.
 */
const FOCUSABLE =
  'a[href], button:not([disabled]), input:not([disabled]):not([type=hidden]), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex="-1"])';
/** Where the focus was outside the pop-up: it goes back there when the pop-up closes. */
let opener: HTMLElement | null = null;
let dialog: HTMLElement | null = null;
const focusables = (root: HTMLElement) => [...root.querySelectorAll<HTMLElement>(FOCUSABLE)].filter((el) => el.getClientRects().length > 0);

document.addEventListener('focusin', (e) => {
  if (e.target instanceof HTMLElement && !e.target.closest('.dialog-ux')) opener = e.target;
});
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Tab' || !dialog?.isConnected) return;
  const stops = focusables(dialog);
  if (!stops.length) return;
  const at = stops.indexOf(document.activeElement as HTMLElement);
  const first = e.shiftKey ? stops.length - 1 : 0;
  const to = at === -1 ? first : e.shiftKey && at === 0 ? stops.length - 1 : !e.shiftKey && at === stops.length - 1 ? 0 : undefined;
  if (to === undefined) return;
  e.preventDefault();
  stops[to]!.focus();
});

function authorizeDialog(): void {
  const modal = document.querySelector<HTMLElement>('#reference .dialog-ux .modal-ux');
  if (!modal) {
    if (dialog) {
      dialog = null;
      if (opener?.isConnected) opener.focus();
    }
    return;
  }
  modal.setAttribute('role', 'dialog');
  modal.setAttribute('aria-modal', 'true');
  const title = modal.querySelector('.modal-ux-header h3');
  if (title) {
    title.id ||= 'authorize-title';
    modal.setAttribute('aria-labelledby', title.id);
  }
  modal.querySelector('.close-modal')?.setAttribute('aria-label', 'Close');
  // One id per key field, its label pointing at it, and the scheme's heading describing it: each label
  // says only "Value:" (found in review).
  for (const [i, scheme] of modal.querySelectorAll('.auth-container').entries()) {
    const heading = scheme.querySelector('h4');
    if (heading) heading.id ||= `auth-scheme-${i}`;
    for (const input of scheme.querySelectorAll<HTMLInputElement>('input[id]:not([data-own-id])')) {
      const shared = input.id;
      input.id = `${shared}-${i}`;
      input.dataset.ownId = '';
      if (heading) input.setAttribute('aria-describedby', heading.id);
      for (const label of scheme.querySelectorAll(`label[for="${shared}"]`)) label.setAttribute('for', input.id);
    }
  }
  if (modal !== dialog) {
    dialog = modal;
    // Its first field, not the last one Swagger UI's autofocus left it on; with none (every scheme
    // authorized already), its first control (found in review: the focus stayed behind it).
    const stops = focusables(modal);
    (stops.find((el) => el.tagName === 'INPUT') ?? stops[0])?.focus();
  }
}

new MutationObserver(() => {
  fix();
  sectionsNav();
  authorizeDialog();
}).observe(document.getElementById('reference')!, { childList: true, subtree: true });
