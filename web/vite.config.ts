import { resolve } from 'node:path';
import { defineConfig } from 'vite';

// The pages, each its own entry: the gateway serves the HTML at the public URLs (checkout per plan,
// the portal at manage_url, the API reference at {api}/docs, a List-Unsubscribe link; `message` is the
// page of words it answers itself) and the hashed assets under
// /subscriptions_manager/assets/ with immutable caching.
export default defineConfig({
  root: import.meta.dirname,
  base: '/subscriptions_manager/',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2020',
    // No inline scripts or data-URL modules: the pages run under a strict Content-Security-Policy.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 2000,
    rolldownOptions: {
      input: {
        checkout: resolve(import.meta.dirname, 'checkout.html'),
        manage: resolve(import.meta.dirname, 'manage.html'),
        docs: resolve(import.meta.dirname, 'docs.html'),
        unsubscribe: resolve(import.meta.dirname, 'unsubscribe.html'),
        message: resolve(import.meta.dirname, 'message.html'),
      },
    },
  },
});
