import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createConfig, lintFromString } from '@redocly/openapi-core';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { buildOpenApiDocument, EventName, routes, type RouteDef } from '@sb/contracts';

const ROOT = join(import.meta.dirname, '..');
const doc = buildOpenApiDocument() as any;

/** The interface spec's endpoints, kept as a fixture of our own (the spec itself lives outside the repository). */
const specEndpoints = readFileSync(join(ROOT, 'test/fixtures/interface-spec-endpoints.txt'), 'utf8')
  .split('\n')
  .filter((l) => l.trim() && !l.startsWith('#'))
  .map((l) => l.split(' ') as [string, string]);

describe('the OpenAPI document', () => {
  it('lints clean under the strict Redocly configuration of the repository (redocly.yaml)', async () => {
    const config = await createConfig(parse(readFileSync(join(ROOT, 'redocly.yaml'), 'utf8')));
    const problems = await lintFromString({ source: JSON.stringify(doc), absoluteRef: 'openapi.json', config });
    const found = problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`);
    expect(found).toEqual([]);
  });

  it('holds every path and method of the interface spec', () => {
    expect(specEndpoints.length).toBeGreaterThan(30);
    for (const [method, path] of specEndpoints) {
      expect(doc.paths, `${method} ${path}`).toHaveProperty([path]);
      expect(doc.paths[path], `${method} ${path}`).toHaveProperty([method.toLowerCase()]);
    }
  });

  it('describes every route that is not dev-only, with its errors, and no dev route', () => {
    for (const r of routes as readonly RouteDef[]) {
      const op = doc.paths[r.path]?.[r.method];
      if (r.devOnly) {
        expect(op, r.id).toBeUndefined();
        continue;
      }
      expect(op?.operationId, r.id).toBe(r.id);
      for (const code of ['400', '404', '413', '415', '422', '429', '431', '500', '503']) expect(op.responses, `${r.id} ${code}`).toHaveProperty([code]);
      expect(op.responses['429'].headers).toHaveProperty(['Retry-After']);
      expect(op.responses['500'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/Error' });
      if (r.rawBody && r.method === 'post') expect(op.requestBody, `${r.id} documents what the provider sends`).toBeDefined();
    }
    expect(doc.info.license).toEqual({ name: 'MIT', identifier: 'MIT' });
    expect(doc.info.description).toBeTruthy();
  });

  it('declares every tag it uses', () => {
    const declared = new Set(doc.tags.map((t: { name: string }) => t.name));
    const used = [...Object.values(doc.paths), ...Object.values(doc.webhooks)].flatMap((item: any) => Object.values(item).flatMap((op: any) => op.tags ?? []));
    expect(used.length).toBeGreaterThan(0);
    for (const t of used) expect(declared.has(t), t).toBe(true);
  });

  it('describes every outgoing event under webhooks, with its signature headers and its schema', () => {
    expect(Object.keys(doc.webhooks).sort()).toEqual([...EventName.options].sort());
    for (const name of EventName.options) {
      const op = doc.webhooks[name].post;
      expect(op.parameters.map((p: { name: string }) => p.name).sort()).toEqual(['webhook-id', 'webhook-signature', 'webhook-timestamp']);
      const ref = op.requestBody.content['application/json'].schema.$ref as string;
      const schema = doc.components.schemas[ref.split('/').pop()!];
      expect(schema.properties.event).toMatchObject({ enum: [name] });
      expect(schema.properties.data.required).toEqual(expect.arrayContaining(['plan_id', 'plan_name', 'status']));
      // The spec's WebhookEvent: subscription_id is no optional field, on any event.
      expect(schema.properties.data.required, name).toContain('subscription_id');
    }
  });

  it('says what the server does with payment_method nwc on /public/subscribe', () => {
    const body = doc.components.schemas.SubscribeRequest;
    expect(JSON.stringify(body.properties.payment_method)).toMatch(/nwc.*422.*\/public\/subscribe\/nwc/);
  });
});
