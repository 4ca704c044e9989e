// Bundles the extension (src/extension.ts and everything it imports, vscode excluded) into dist/.
import { build } from 'esbuild';

const production = process.argv.includes('--production');
await build({
  entryPoints: ['src/extension.ts'],
  bundle: true,
  outfile: 'dist/extension.js',
  external: ['vscode'],
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  sourcemap: !production,
  minify: production,
  logLevel: 'warning',
});
