// Bundles envd into one self-contained file, dist/envd.js, that runs with
// `node dist/envd.js` and needs no node_modules; then wraps that file and the
// Node 24 binary into one executable, dist/envd, for guest images that have no Node.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';

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

buildSingleExecutable();

/**
 * Node's single executable application flow: a blob made from dist/envd.js is injected
 * into a stripped copy of the Node binary that runs this script. Skipped when neither
 * the bundle nor the Node binary changed, so `npm test` pays for it once.
 */
function buildSingleExecutable() {
  const major = Number(process.versions.node.split('.')[0]);
  if (major < 24) throw new Error(`build.mjs must run under Node 24 (npm scripts use node_modules/.bin/node), got ${process.version}`);

  // The V8 flags envd is deployed with; the executable applies them itself (SEA execArgv).
  const nodeFlags = JSON.parse(readFileSync('package.json', 'utf8')).envd?.nodeFlags ?? [];
  const inputs = createHash('sha256')
    .update(readFileSync('dist/envd.js'))
    .update(JSON.stringify(nodeFlags))
    .update(process.execPath)
    .update(process.version)
    .digest('hex');
  const stampFile = 'dist/envd.inputs';
  if (existsSync('dist/envd') && existsSync(stampFile) && readFileSync(stampFile, 'utf8') === inputs) return;

  writeFileSync(
    'dist/sea-config.json',
    JSON.stringify({
      main: 'dist/envd.js',
      output: 'dist/sea-prep.blob',
      disableExperimentalSEAWarning: true,
      useCodeCache: true,
      execArgv: nodeFlags,
    }),
  );
  run(process.execPath, ['--experimental-sea-config', 'dist/sea-config.json']);

  // Built beside the target and renamed, so an interrupted build never leaves a half-made dist/envd.
  const partial = 'dist/envd.partial';
  rmSync(partial, { force: true });
  copyFileSync(process.execPath, partial);
  chmodSync(partial, 0o755);
  // Symbols are about half of Node's 120 MB; a guest image has no use for them.
  try {
    run('strip', [partial]);
  } catch (error) {
    console.warn(`build.mjs: strip failed (${error.message.split('\n')[0]}); dist/envd keeps its symbols. Install binutils for a smaller binary.`);
  }
  // postject runs under this same Node, whatever `node` is first on PATH.
  run(process.execPath, [
    'node_modules/postject/dist/cli.js',
    partial,
    'NODE_SEA_BLOB',
    'dist/sea-prep.blob',
    '--sentinel-fuse',
    'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2',
  ]);
  renameSync(partial, 'dist/envd');
  rmSync('dist/sea-prep.blob');
  writeFileSync(stampFile, inputs);
}

function run(file, args) {
  execFileSync(file, args, { stdio: ['ignore', 'ignore', 'pipe'] });
}
