// The conversion itself (image-to-template.mjs runs it): inside a work
// directory, the image's files become `root/`, envd is installed into it, and
// `mkfs.ext4 -d` makes `image.ext4`. The input comes as an open descriptor (an
// image tarball, or a tar stream of an unpacked root) or, in the in-root mode,
// as a directory to copy. image-to-template.mjs runs this file as the root of a
// user namespace (userns.mjs) with the work directory as its cwd, so every path
// here is relative to `work` and nothing needs to be reachable from / by the
// namespace's unprivileged ids; `summary.json` tells the caller what was built.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InRootError, readFileInRoot, resolveInRoot, writeFileInRoot } from './in-root.mjs';
import { BadInput, installEnvd } from './install.mjs';
import { applyLayer, LayerError } from './layers.mjs';

/** An OCI content digest (image-spec descriptor.md): algorithm, then the encoded hash; nothing a path could climb with. */
const DIGEST = /^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$/;
/** What the work directory holds when the conversion succeeded. */
export const IMAGE_NAME = 'image.ext4';
export const SUMMARY_NAME = 'summary.json';

/** Runs a program; its failure is ours (exit 1), with what it printed. */
function run(file, args) {
  const result = spawnSync(file, args, { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  if (result.error) throw result.error;
  if (result.status !== 0) throw Object.assign(new Error(`${file} ${args.join(' ')} failed (${result.status}): ${result.stderr.trim()}`), { status: result.status, stderr: result.stderr });
  return result.stdout;
}

/**
 * The host path of `name` inside the unpacked image: relative, no `..`, and
 * its symlinks (docker save links identical layers) resolved inside the image.
 * It must be a regular file there.
 */
function fileInImage(unpacked, name, what) {
  if (typeof name !== 'string' || name === '' || name.startsWith('/') || name.split('/').includes('..')) {
    throw new BadInput(`${what} ${JSON.stringify(name)} is not a path inside the image`);
  }
  let found;
  try {
    found = resolveInRoot(unpacked, name);
  } catch (error) {
    if (error instanceof InRootError) throw new BadInput(`${what} ${JSON.stringify(name)}: ${error.message}`);
    throw error;
  }
  if (found.missing || !found.stat.isFile()) throw new BadInput(`${what} ${JSON.stringify(name)} is not a file in the image`);
  return found.path;
}

const readJson = (path, what) => {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new BadInput(`${what}: ${error.message}`);
  }
};

/** The layers (in order) and the image config of an unpacked docker-save or OCI tarball; undefined for a flat root. */
function describeImage(unpacked) {
  const blob = (descriptor, what) => {
    const digest = descriptor?.digest;
    if (typeof digest !== 'string' || !DIGEST.test(digest)) throw new BadInput(`${what}: ${JSON.stringify(digest)} is not a digest`);
    return fileInImage(unpacked, `blobs/${digest.replace(':', '/')}`, what);
  };
  const has = (name) => !resolveInRoot(unpacked, name, { followLast: false }).missing;
  if (has('manifest.json')) {
    const [manifest] = [readJson(fileInImage(unpacked, 'manifest.json', 'manifest.json'), 'manifest.json')].flat();
    if (!Array.isArray(manifest?.Layers)) throw new BadInput('manifest.json lists no layers');
    return {
      layers: manifest.Layers.map((layer) => fileInImage(unpacked, layer, 'manifest.json: layer')),
      config: manifest.Config ? readJson(fileInImage(unpacked, manifest.Config, 'manifest.json: config'), 'the image config') : {},
    };
  }
  if (has('index.json')) {
    let manifest = readJson(fileInImage(unpacked, 'index.json', 'index.json'), 'index.json');
    // An index may point at a manifest or at another index (multi-platform): follow to linux/amd64 or the first.
    for (let depth = 0; manifest?.manifests; depth++) {
      if (!Array.isArray(manifest.manifests) || depth > 8) throw new BadInput('index.json: the indexes do not lead to a manifest');
      const pick = manifest.manifests.find((m) => m?.platform?.os === 'linux' && m?.platform?.architecture === 'amd64') ?? manifest.manifests[0];
      if (!pick) throw new BadInput('index.json lists no manifest');
      manifest = readJson(blob(pick, 'index.json: manifest'), `manifest ${pick.digest}`);
    }
    if (!Array.isArray(manifest?.layers)) throw new BadInput('the OCI manifest lists no layers');
    return { layers: manifest.layers.map((layer) => blob(layer, 'the OCI manifest: layer')), config: manifest.config ? readJson(blob(manifest.config, 'the OCI manifest: config'), 'the image config') : {} };
  }
  return undefined;
}

/**
 * --entrypoint: the same as a service (the body of PUT /services/entrypoint): the program and its arguments
 * run without a shell, restarted when it fails (the default policy, on-failure).
 */
function entrypointService(config) {
  const { args: [cmd, ...args], ...rest } = entrypointOf(config);
  return { cmd, args, ...rest };
}

/** What --entrypoint-once hands envd: the image's Entrypoint + Cmd, run as its User in its WorkingDir with its Env. */
function entrypointOf(config) {
  const c = config.config ?? config.Config ?? {};
  const args = [...(c.Entrypoint ?? []), ...(c.Cmd ?? [])];
  if (args.length === 0) throw new BadInput('--entrypoint: the image has no Entrypoint or Cmd');
  const envs = Object.fromEntries((c.Env ?? []).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
  return { args, ...(c.User ? { user: String(c.User) } : {}), ...(c.WorkingDir ? { cwd: c.WorkingDir } : {}), envs };
}


/**
 * Builds `work/image.ext4` from `input`: `{ fd, kind: 'tar' }` (an image tarball,
 * docker save / OCI / flat), `{ fd, kind: 'tree' }` (a tar stream of an unpacked
 * root) or `{ dir }` (an unpacked root, copied). Writes `work/summary.json` and
 * returns it. Removes the trees it made, success or not: in a namespace with
 * subordinate ids, the caller could not remove them itself.
 */
export function convertInWork(work, input, options, log) {
  const root = join(work, 'root');
  const unpacked = join(work, 'image');
  try {
    mkdirSync(root);
    let config = {};
    if (input.dir !== undefined) {
      run('cp', ['-a', `${input.dir}/.`, root]);
    } else if (input.kind === 'tree') {
      extract(input.fd, root, 'the image directory');
    } else {
      mkdirSync(unpacked);
      extract(input.fd, unpacked, 'the image');
      const described = describeImage(unpacked);
      if (described) {
        for (const layer of described.layers) applyLayer(root, layer);
        config = described.config;
      } else {
        rmSync(root, { recursive: true });
        renameSync(unpacked, root); // a flat root (docker export)
      }
    }
    const installed = installEnvd(root, { defaultUser: options.defaultUser, init: options.init }, log);
    if (options.entrypoint === 'service') {
      writeFileInRoot(root, '/etc/envd/services/entrypoint.json', `${JSON.stringify(entrypointService(config))}\n`, 0o644);
    } else if (options.entrypoint === 'once') {
      writeFileInRoot(root, '/etc/envd/entrypoint.json', `${JSON.stringify(entrypointOf(config))}\n`, 0o644);
      writeFileInRoot(root, '/etc/envd/envd.env', `${readFileInRoot(root, '/etc/envd/envd.env')}ENVD_ENTRYPOINT_FILE=/etc/envd/entrypoint.json\n`, 0o644);
    }
    const usedMib = Math.ceil(Number(execFileSync('du', ['-sb', root], { encoding: 'utf8' }).split('\t')[0]) / 1024 / 1024);
    // Room to work in: a fifth more than the files, and at least 256 MiB free.
    const sizeMib = options.sizeMib ?? Math.max(usedMib + 256, Math.ceil(usedMib * 1.2));
    run('mkfs.ext4', ['-q', '-F', '-L', 'rootfs', '-d', root, join(work, IMAGE_NAME), `${sizeMib}M`]);
    const summary = { sizeMib, usedMib, init: installed.init, defaultUser: installed.defaultUser };
    writeFileSync(join(work, SUMMARY_NAME), JSON.stringify(summary));
    return summary;
  } finally {
    rmSync(root, { recursive: true, force: true });
    rmSync(unpacked, { recursive: true, force: true });
  }
}

/** tar -x of descriptor `fd` into `dir`, owners as the archive says (the namespace's ids, or the host's in-root mode). */
function extract(fd, dir, what) {
  const tar = spawnSync('tar', ['-xpf', '-', '-C', dir, '--numeric-owner'], { stdio: [fd, 'ignore', 'pipe'], encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (tar.error) throw tar.error;
  // An owner beyond the namespace's 65,536 ids ("Invalid argument"), a device node (EPERM) or a broken stream.
  if (tar.status !== 0) throw new BadInput(`${what} could not be unpacked: ${tar.stderr.trim().split('\n').slice(0, 3).join('; ')}`);
}

export const isBadInput = (error) => error instanceof BadInput || error instanceof LayerError || error instanceof InRootError;

// In a namespace: `node convert.mjs OPTIONS_JSON`, the input on stdin, the work directory as cwd.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const { kind, ...options } = JSON.parse(process.argv[2]);
    convertInWork('.', { fd: 0, kind }, options, (line) => process.stdout.write(`image-to-template: ${line}\n`));
  } catch (error) {
    process.stderr.write(`image-to-template: ${error.message}\n`);
    process.exit(isBadInput(error) ? 2 : 1);
  }
}
