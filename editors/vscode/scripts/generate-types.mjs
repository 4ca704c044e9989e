// Generates src/generated/protocol.ts from the bridge's committed JSON Schema (docs/protocol.schema.json).
// The output is git-ignored and rebuilt by every typecheck/build, so the client's types can never
// drift from the contract: a renamed or removed field fails `tsc` instead of failing at run time.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compile } from 'json-schema-to-typescript';

const here = dirname(fileURLToPath(import.meta.url));
const schemaPath = resolve(here, '../../../docs/protocol.schema.json');
const outPath = resolve(here, '../src/generated/protocol.ts');

/** Drop nested `title`s (pydantic puts one on every field) so only the named models become types. */
function stripNestedTitles(node, isDefinition) {
  if (Array.isArray(node)) {
    return node.map((item) => stripNestedTitles(item, false));
  }
  if (node === null || typeof node !== 'object') {
    return node;
  }
  const out = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === 'title' && !isDefinition) {
      continue;
    }
    if (key === '$defs' || key === 'properties') {
      out[key] = Object.fromEntries(
        Object.entries(value).map(([name, sub]) => [name, stripNestedTitles(sub, key === '$defs')]),
      );
    } else {
      out[key] = stripNestedTitles(value, false);
    }
  }
  return out;
}

const schema = stripNestedTitles(JSON.parse(readFileSync(schemaPath, 'utf8')), false);
const ts = await compile(schema, 'PiBridgeContract', {
  unreachableDefinitions: true,
  additionalProperties: false,
  bannerComment:
    '/* Generated from docs/protocol.schema.json by scripts/generate-types.mjs; do not edit. */',
});
mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, ts);
