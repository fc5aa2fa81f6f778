// Bundles envd into one self-contained file, dist/envd.js, that runs with
// `node dist/envd.js` and needs no node_modules.
import { build } from 'esbuild';
import { writeFileSync } from 'node:fs';

await build({
  entryPoints: ['src/main.ts'],
  outfile: 'dist/envd.js',
  bundle: true,
  platform: 'node',
  target: 'node24',
  // CommonJS, because a Node single executable application embeds a CommonJS script.
  format: 'cjs',
  minify: true,
  keepNames: true,
  legalComments: 'none',
  logLevel: 'warning',
});

// The repository's package.json says "type": "module"; this keeps dist/ CommonJS.
writeFileSync('dist/package.json', '{ "type": "commonjs" }\n');
