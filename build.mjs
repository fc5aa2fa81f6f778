// Bundles envd into one self-contained file, dist/envd.js, that runs with
// `node dist/envd.js` and needs no node_modules; then wraps that file and the
// Node 24 binary into one executable, dist/runtime/envd-node, with the loader and
// libraries it links in dist/runtime/lib, and dist/envd, the static launcher that
// runs it with them: for guest images that have no Node, or no glibc (docs/guest.md).
// First it compiles the per-command holder, dist/envd-holder (the C units in src/holder/),
// which the single executable carries as an asset; last dist/envd-init, PID 1 of
// an image without systemd.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';

const major = Number(process.versions.node.split('.')[0]);
if (major < 24) throw new Error(`build.mjs must run under Node 24 (npm scripts use node_modules/.bin/node), got ${process.version}`);

mkdirSync('dist', { recursive: true });
const holderHash = buildHolder();
const mallocTrimHash = buildMallocTrimAddon();

const bundleOptions = {
  bundle: true,
  platform: 'node',
  target: 'node24',
  // CommonJS, because a Node single executable application embeds a CommonJS script.
  format: 'cjs',
  // keepNames would wrap every closure fastify creates per request in a
  // defineProperty call: the HTTP floor bench measured 0.6x bare fastify with
  // it and 1.0-1.1x without. Errors carry their own `name`.
  keepNames: false,
  legalComments: 'none',
  logLevel: 'warning',
};

await build({
  ...bundleOptions,
  entryPoints: ['src/main.ts'],
  outfile: 'dist/envd.js',
  minify: true,
  define: {
    ENVD_OPENAPI_JSON: JSON.stringify(await generateOpenApiJson()),
    ENVD_HOLDER_HASH: JSON.stringify(holderHash.slice(0, 12)),
    ENVD_MALLOC_TRIM_HASH: JSON.stringify(mallocTrimHash.slice(0, 12)),
  },
  // node:crypto: needed from the first command or upload on (ids, temp names), not to start or to answer /health.
  plugins: [
    loadOnFirstUse(['http2', 'https', 'crypto', 'readline', 'dns', 'child_process']),
    leaveOut(['light-my-request', '@fastify/ajv-compiler']),
    loadPackagesOnFirstUse(['semver', '@fastify/fast-json-stringify-compiler', 'ajv']),
    sseWithoutFetch(),
  ],
});

// The typed client for other projects (package.json "exports": "./client"): one ESM file with no
// dependency but fetch; its types are the TS source (docs/client.md says why).
await build({ ...bundleOptions, format: 'esm', entryPoints: ['src/client/index.ts'], outfile: 'dist/client.mjs' });

/**
 * GET /openapi.json's document, generated here from the route schemas by the
 * same code the tests run in process (src/lifecycle/openapi-document.ts), so
 * the bundle serves it as a constant and never loads @fastify/swagger or yaml.
 */
async function generateOpenApiJson() {
  const generator = 'dist/openapi-generator.cjs';
  await build({
    ...bundleOptions,
    stdin: {
      contents: `import { generateOpenApiJson } from './src/lifecycle/openapi-document.ts';
generateOpenApiJson().then((json) => process.stdout.write(json), (error) => { console.error(error); process.exit(1); });`,
      resolveDir: '.',
      loader: 'ts',
    },
    outfile: generator,
  });
  try {
    const json = execFileSync(process.execPath, [generator], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, stdio: ['ignore', 'pipe', 'inherit'] });
    JSON.parse(json); // a generator that printed anything else fails the build here
    // JSON escapes for anything beyond ASCII: one such character (a "−") would make V8
    // keep the whole 47 KB text as a two-byte string.
    return json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  } finally {
    rmSync(generator, { force: true });
  }
}

/**
 * Packages that fastify requires only for features envd does not use:
 * light-my-request for `app.inject()` (the tests use real sockets) and
 * @fastify/ajv-compiler for its default validators (envd hands it its own,
 * src/validation.ts). Each is replaced by a module that throws if it is ever
 * loaded, so using one of those features fails loudly instead of silently
 * missing. 94 KB less bundle to read and compile at every start.
 */
function leaveOut(names) {
  return {
    name: 'leave-out',
    setup(build) {
      build.onResolve({ filter: new RegExp(`^(${names.join('|')})$`) }, ({ path }) => ({ path, namespace: 'leave-out' }));
      build.onLoad({ filter: /.*/, namespace: 'leave-out' }, ({ path }) => ({
        loader: 'js',
        contents: `throw new Error(${JSON.stringify(`${path} is left out of envd's bundle (build.mjs)`)});`,
      }));
    },
  };
}

/**
 * Node built-ins that dependencies require at start but envd only needs for
 * options it never uses (fastify's server.js requires http2 and https for
 * `http2: true` / `https: {...}`; better-sse checks `instanceof
 * Http2ServerRequest` only after the HTTP/1 check has matched). Not loading
 * them saved ~2 MiB of idle RSS (interleaved A/B); each is replaced by an object that
 * requires the real module the first time one of its exports is read.
 * The export names are listed here, from the Node that builds (the same
 * version the bundle runs on), so bundled ESM imports of them do not load it.
 */
function loadOnFirstUse(names) {
  const exportsOf = (name) => Object.keys(createRequire(import.meta.url)(`node:${name}`));
  return {
    name: 'load-on-first-use',
    setup(build) {
      // Only imports from real files: the stand-in's own require('node:<name>') must reach the built-in, not itself.
      build.onResolve({ filter: new RegExp(`^(node:)?(${names.join('|')})$`), namespace: 'file' }, ({ path }) => ({ path: path.replace(/^node:/, ''), namespace: 'load-on-first-use' }));
      build.onLoad({ filter: /.*/, namespace: 'load-on-first-use' }, ({ path: name }) => ({ loader: 'js', contents: standIn(`node:${name}`, exportsOf(name)) }));
    },
  };
}

/**
 * The same for bundled packages that are required at start but used only
 * later, if ever: semver (fastify's plugin-utils requires it to check a
 * plugin's declared fastify version; envd registers none that declares one),
 * fast-json-stringify's compiler (response serializers are built on a
 * route's first JSON answer, src/serialization.ts) and ajv (validators are
 * compiled on a route's first request, src/validation.ts). Their module
 * code is bundled as usual but runs on first use: with /health answering
 * ready-made JSON, 40-46 ms less start-up on a 2-CPU guest (interleaved A/B,
 * docs/performance.md).
 */
function loadPackagesOnFirstUse(names) {
  return {
    name: 'load-packages-on-first-use',
    setup(build) {
      build.onResolve({ filter: new RegExp(`^(${names.map((n) => n.replace(/[/.]/g, '\\$&')).join('|')})$`), namespace: 'file' }, async ({ path, resolveDir, kind, pluginData }) => {
        // The inner lookup below comes back here: let esbuild resolve that one.
        if (pluginData === 'real') return undefined;
        // The package the importer would get (fastify may have its own nested copy), as the stand-in's target.
        const real = await build.resolve(path, { resolveDir, kind, pluginData: 'real' });
        if (real.errors.length > 0) return { errors: real.errors };
        return { path: real.path, namespace: 'load-packages-on-first-use' };
      });
      build.onLoad({ filter: /.*/, namespace: 'load-packages-on-first-use' }, ({ path }) => {
        const real = createRequire(path)(path);
        return { loader: 'js', resolveDir: dirname(path), contents: standIn(path, Object.keys(real), typeof real === 'function') };
      });
    },
  };
}

/**
 * A module whose exports are those of `target`, which it requires the first
 * time one of them is read, or, for a module that exports a function or class
 * (`callable`: ajv's CommonJS export is its class), the first time it is
 * called. The bound function has no own keys beyond `length` and `name`, so
 * the proxy may list only the real module's.
 */
function standIn(target, names, callable = false) {
  return `let real;
const load = () => (real ??= require(${JSON.stringify(target)}));
const names = ${JSON.stringify(names)};
module.exports = new Proxy(${callable ? 'function () {}.bind(null)' : '{}'}, {
  get: (_, key) => load()[key],
  apply: (_, self, args) => Reflect.apply(load(), self, args),
  construct: (_, args) => Reflect.construct(load(), args),
  has: (_, key) => names.includes(key) || key in load(),
  ownKeys: () => names,
  getOwnPropertyDescriptor: (_, key) => (names.includes(key) ? { configurable: true, enumerable: true, writable: false, value: undefined } : undefined),
});
`;
}

// The repository's package.json says "type": "module"; this keeps dist/ CommonJS.
writeFileSync('dist/package.json', '{ "type": "commonjs" }\n');

buildSingleExecutable();
// dist/envd: the launcher that runs dist/runtime/envd-node with the libraries beside it.
buildStaticProgram('src/launcher', 'dist/envd');
// envd-init: PID 1 of an image without systemd (src/init/, docs/guest.md).
buildStaticProgram('src/init', 'dist/envd-init');

/**
 * Node's single executable application flow: a blob made from dist/envd.js is injected
 * into a stripped copy of the Node binary that runs this script. Skipped when neither
 * the bundle nor the Node binary changed, so `npm test` pays for it once.
 */
function buildSingleExecutable() {
  // The V8 flags envd is deployed with; the executable applies them itself (SEA execArgv).
  const nodeFlags = JSON.parse(readFileSync('package.json', 'utf8')).envd?.nodeFlags ?? [];
  const inputs = createHash('sha256')
    .update(readFileSync('dist/envd.js'))
    .update(JSON.stringify(nodeFlags))
    .update(holderHash)
    .update(mallocTrimHash)
    .update(process.execPath)
    .update(process.version)
    .digest('hex');
  const stampFile = 'dist/runtime/envd-node.inputs';
  const target = 'dist/runtime/envd-node';
  if (existsSync(target) && existsSync('dist/runtime/lib/ld.so') && existsSync(stampFile) && readFileSync(stampFile, 'utf8') === inputs) return;
  mkdirSync('dist/runtime', { recursive: true });

  writeFileSync(
    'dist/sea-config.json',
    JSON.stringify({
      main: 'dist/envd.js',
      output: 'dist/sea-prep.blob',
      disableExperimentalSEAWarning: true,
      useCodeCache: true,
      execArgv: nodeFlags,
      // src/holder/binary.ts writes the holder out to the state dir at startup, src/native/malloc-trim.ts
      // the addon on its first use.
      assets: { 'envd-holder': 'dist/envd-holder', 'envd-malloc-trim.node': 'dist/envd-malloc-trim.node' },
    }),
  );
  run(process.execPath, ['--experimental-sea-config', 'dist/sea-config.json']);

  // Built beside the target and renamed, so an interrupted build never leaves a half-made dist/envd.
  const partial = `${target}.partial`;
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
  bundleRuntimeLibraries(partial);
  renameSync(partial, target);
  rmSync('dist/sea-prep.blob');
  writeFileSync(stampFile, inputs);
}

/**
 * Compiles the holder: the C11 units of src/holder/ (one .c per concern, the
 * .h files beside them), libc only, linked statically so it runs
 * in any guest whatever its libc, starts in a millisecond (no dynamic loader),
 * and ignores the LD_PRELOAD a command's environment (which it runs in) may set. Returns the
 * sha256 of the binary, an input of the single executable.
 */
/**
 * dist/envd-malloc-trim.node: the Node-API addon of src/native/malloc-trim.c, a
 * shared object for the Node that builds (its headers ship with it, under
 * include/node). Returns its sha256. Skipped when neither the source nor the
 * headers changed.
 */
function buildMallocTrimAddon() {
  // malloc-trim.c registers the addon's functions; random-reseed.c, file-batch.c, open-at.c, byte-search.c and search-batch.c are the others.
  const sources = ['src/native/malloc-trim.c', 'src/native/random-reseed.c', 'src/native/file-batch.c', 'src/native/open-at.c', 'src/native/list-dir.c', 'src/native/byte-search.c', 'src/native/search-batch.c'];
  const output = 'dist/envd-malloc-trim.node';
  const headers = nodeApiHeaders();
  const flags = ['-std=c11', '-O2', '-Wall', '-Wextra', '-Werror', '-s', '-shared', '-fPIC', `-I${headers}`];
  const hash = createHash('sha256').update(JSON.stringify(flags)).update(readFileSync(`${headers}/node_api.h`));
  for (const header of ['random-reseed.h', 'file-batch.h', 'open-at.h', 'list-dir.h', 'js-number.h', 'byte-search.h', 'search-batch.h']) hash.update(readFileSync(`src/native/${header}`));
  for (const source of sources) hash.update(readFileSync(source));
  const inputs = hash.digest('hex');
  const stampFile = `${output}.inputs`;
  if (!(existsSync(output) && existsSync(stampFile) && readFileSync(stampFile, 'utf8') === inputs)) {
    run('cc', [...flags, '-o', `${output}.partial`, ...sources]);
    renameSync(`${output}.partial`, output);
    writeFileSync(stampFile, inputs);
  }
  return createHash('sha256').update(readFileSync(output)).digest('hex');
}

/** include/node of the Node that builds: beside its binary, or in the npm \`node\` package's platform package. */
function nodeApiHeaders() {
  const candidates = [`${dirname(dirname(realpathSync(process.execPath)))}/include/node`];
  try {
    const nodePackage = createRequire(import.meta.url).resolve('node/package.json');
    const platformPackage = createRequire(nodePackage).resolve(`node-${process.platform}-${process.arch}/package.json`);
    candidates.push(`${dirname(platformPackage)}/include/node`);
  } catch {
    // Not the npm \`node\` package: only the first place applies.
  }
  const found = candidates.find((dir) => existsSync(`${dir}/node_api.h`));
  if (!found) throw new Error(`build.mjs: no Node-API headers (node_api.h) in ${candidates.join(' or ')}`);
  return found;
}

function buildHolder() {
  const output = buildStaticProgram('src/holder', 'dist/envd-holder');
  return createHash('sha256').update(readFileSync(output)).digest('hex');
}

/**
 * Compiles the C11 units of `dir` into one static, stripped, libc-only program at
 * `output`. Skipped when neither the sources nor the flags changed.
 */
function buildStaticProgram(dir, output) {
  const stampFile = `${output}.inputs`;
  // -s: symbols would only cost guest image and state-dir (tmpfs) space.
  const flags = ['-std=c11', '-O2', '-Wall', '-Wextra', '-Werror', '-s'];
  const names = readdirSync(dir).filter((name) => name.endsWith('.c') || name.endsWith('.h')).sort();
  const sources = names.filter((name) => name.endsWith('.c')).map((name) => `${dir}/${name}`);
  const hash = createHash('sha256').update(JSON.stringify(flags));
  for (const name of names) hash.update(name).update(readFileSync(`${dir}/${name}`));
  const inputs = hash.digest('hex');
  if (!(existsSync(output) && existsSync(stampFile) && readFileSync(stampFile, 'utf8') === inputs)) {
    const partial = `${output}.partial`;
    rmSync(partial, { force: true });
    try {
      run('cc', [...flags, '-static', '-o', partial, ...sources]);
    } catch (error) {
      // A toolchain without a static libc (e.g. no libc6-dev static archive) still gets a working program.
      console.warn(`build.mjs: static link of ${output} failed (${error.message.split('\n')[0]}); linking dynamically, so it needs this libc at run time.`);
      run('cc', [...flags, '-o', partial, ...sources]);
    }
    renameSync(partial, output);
    writeFileSync(stampFile, inputs);
  }
  return output;
}

/**
 * dist/runtime/lib: the dynamic loader (as ld.so) and every library the Node
 * binary links, copied from the build machine (the files, not their symlinks),
 * so that dist/envd (src/launcher/) runs envd with them and nothing of the
 * image's: Node 24 needs glibc >= 2.28 and libstdc++, which busybox, musl and
 * older images lack (docs/guest.md). `ldd` lists them, the loader included.
 */
function bundleRuntimeLibraries(binary) {
  const dir = 'dist/runtime/lib';
  const partial = `${dir}.partial`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  const listing = execFileSync('ldd', [binary], { encoding: 'utf8' });
  let loader;
  for (const line of listing.split('\n')) {
    const linked = line.match(/^\s*(\S+) => (\/\S+) \(/);
    if (linked) copyFileSync(linked[2], `${partial}/${linked[1]}`);
    const interpreter = line.match(/^\s*(\/\S*ld-linux\S*) \(/);
    if (interpreter) loader = interpreter[1];
  }
  if (!loader) throw new Error(`build.mjs: ldd ${binary} names no dynamic loader:\n${listing}`);
  copyFileSync(loader, `${partial}/ld.so`);
  for (const name of readdirSync(partial)) chmodSync(`${partial}/${name}`, 0o755);
  rmSync(dir, { recursive: true, force: true });
  renameSync(partial, dir);
}

function run(file, args) {
  execFileSync(file, args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/**
 * better-sse with src/sse-fetch-stand-ins.ts in place of the Fetch globals it
 * touches (that file says why): declared at the top of its module, they
 * shadow the globals for its code alone. envd imports it, so its ESM build is
 * the one bundled (test/main.test.ts fails if a stream loads undici).
 */
function sseWithoutFetch() {
  const standIns = new URL('./src/sse-fetch-stand-ins.ts', import.meta.url).pathname;
  return {
    name: 'sse-without-fetch',
    setup(build) {
      build.onLoad({ filter: /[\\/]better-sse[\\/]build[\\/]index\.mjs$/ }, ({ path }) => ({
        loader: 'js',
        contents: `import { Request, Response, Headers } from ${JSON.stringify(standIns)};\n${readFileSync(path, 'utf8')}`,
      }));
    },
  };
}
