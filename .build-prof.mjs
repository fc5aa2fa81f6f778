import { build } from 'esbuild';
const out = process.argv[2];
await build({ entryPoints: ['src/main.ts'], outfile: `${out}/envd.js`, bundle: true, platform: 'node', target: 'node24', format: 'cjs', minify: false, keepNames: false, legalComments: 'none', logLevel: 'warning', metafile: true }).then((r) => (await import("node:fs")).writeFileSync(`${out}/meta.json`, JSON.stringify(r.metafile)));
