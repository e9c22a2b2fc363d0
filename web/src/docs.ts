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

// Swagger UI renders the server choice without a label: name it for screen readers once it appears.
new MutationObserver(() => {
  const servers = document.querySelector<HTMLSelectElement>('select#servers:not([aria-label])');
  if (servers) servers.setAttribute('aria-label', 'Server');
}).observe(document.getElementById('reference')!, { childList: true, subtree: true });
