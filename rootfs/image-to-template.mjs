#!/usr/bin/env node
// Turns a container image into a sandbox template's root filesystem image, with
// no Docker daemon and no network (issue 25 §4):
//
//   node rootfs/image-to-template.mjs IMAGE OUTPUT.ext4 [--default-user USER]
//        [--init auto|systemd|openrc|busybox|envd-init] [--entrypoint | --entrypoint-once] [--size-mib N]
//
// IMAGE is an unpacked root directory, a `docker save` tarball (manifest.json),
// an OCI image layout tarball (index.json) or a flat root tarball (`docker
// export`). Layers are applied in order with their whiteouts (.wh.NAME removes
// NAME, .wh..wh..opq empties its directory); then rootfs/install.sh injects
// envd and the init (systemd if the image has it, else OpenRC, else envd-init as
// /sbin/init); --entrypoint writes the image's Entrypoint + Cmd as the service
// `entrypoint` (/etc/envd/services/entrypoint.json: started at boot, restarted
// when it fails, issue 39), --entrypoint-once as before (issue 25: started once
// per boot, --entrypoint-file); `mkfs.ext4 -d` makes the image (no loop mount).
// Everything happens in a work directory beside OUTPUT, renamed into place at
// the end: a failure leaves no half-written image. Bad input exits 2.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { InRootError, readFileInRoot, resolveInRoot, writeFileInRoot } from './in-root.mjs';
import { BadInput, installEnvd } from './install.mjs';
import { applyLayer, LayerError } from './layers.mjs';

const USAGE = 'usage: image-to-template.mjs IMAGE OUTPUT.ext4 [--default-user USER] [--init auto|systemd|openrc|busybox|envd-init] [--entrypoint | --entrypoint-once] [--size-mib N]';
/** An OCI content digest (image-spec descriptor.md): algorithm, then the encoded hash; nothing a path could climb with. */
const DIGEST = /^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$/;

function parseArgs(argv) {
  const options = { defaultUser: undefined, init: 'auto', entrypoint: undefined, sizeMib: undefined, positional: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new BadInput(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--default-user') options.defaultUser = value();
    else if (arg === '--init') options.init = value();
    else if (arg === '--entrypoint') options.entrypoint = 'service';
    else if (arg === '--entrypoint-once') options.entrypoint = 'once';
    else if (arg === '--size-mib') {
      options.sizeMib = Number(value());
      if (!Number.isInteger(options.sizeMib) || options.sizeMib < 16) throw new BadInput('--size-mib must be a whole number of at least 16');
    } else if (arg.startsWith('-')) throw new BadInput(`unknown option ${arg}`);
    else options.positional.push(arg);
  }
  if (options.positional.length !== 2) throw new BadInput(USAGE);
  return options;
}

/** Runs a program; its failure is ours (exit 1), with what it printed. */
function run(file, args) {
  const result = spawnSync(file, args, { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  if (result.error) throw result.error;
  if (result.status !== 0) throw Object.assign(new Error(`${file} ${args.join(' ')} failed (${result.status}): ${result.stderr.trim()}`), { status: result.status, stderr: result.stderr });
  return result.stdout;
}

/** Entries of a tar archive (compression detected by tar); a file that is no archive is bad input. */
function listTar(archive) {
  try {
    return run('tar', ['-tf', archive]).split('\n').filter(Boolean);
  } catch (error) {
    throw new BadInput(`${archive} is not a tar archive (${error.stderr?.trim().split('\n')[0] ?? error.message})`);
  }
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

function main() {
  const options = parseArgs(process.argv.slice(2));
  const [image, outputArg] = options.positional.map((p) => resolve(p));
  const output = outputArg;
  if (!existsSync(image)) throw new BadInput(`${image} does not exist`);
  if (!existsSync(dirname(output))) throw new BadInput(`the directory of ${output} does not exist`);
  const work = mkdtempSync(join(dirname(output), `.${basename(output)}.work-`));
  const cleanUp = () => rmSync(work, { recursive: true, force: true });
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => (cleanUp(), process.exit(1)));
  try {
    const root = join(work, 'root');
    mkdirSync(root);
    let config = {};
    if (statSync(image).isDirectory()) {
      run('cp', ['-a', `${image}/.`, root]);
    } else {
      const unpacked = join(work, 'image');
      mkdirSync(unpacked);
      listTar(image); // bad input before anything else
      run('tar', ['-xf', image, '-C', unpacked, '--numeric-owner']);
      const described = describeImage(unpacked);
      if (described) {
        for (const layer of described.layers) applyLayer(root, layer);
        config = described.config;
      } else {
        rmSync(root, { recursive: true });
        renameSync(unpacked, root); // a flat root (docker export)
      }
    }
    const installed = installEnvd(root, { defaultUser: options.defaultUser, init: options.init }, (line) => process.stdout.write(`image-to-template: ${line}\n`));
    if (options.entrypoint === 'service') {
      writeFileInRoot(root, '/etc/envd/services/entrypoint.json', `${JSON.stringify(entrypointService(config))}\n`, 0o644);
    } else if (options.entrypoint === 'once') {
      writeFileInRoot(root, '/etc/envd/entrypoint.json', `${JSON.stringify(entrypointOf(config))}\n`, 0o644);
      writeFileInRoot(root, '/etc/envd/envd.env', `${readFileInRoot(root, '/etc/envd/envd.env')}ENVD_ENTRYPOINT_FILE=/etc/envd/entrypoint.json\n`, 0o644);
    }
    const usedMib = Math.ceil(Number(execFileSync('du', ['-sb', root], { encoding: 'utf8' }).split('\t')[0]) / 1024 / 1024);
    // Room to work in: a fifth more than the files, and at least 256 MiB free.
    const sizeMib = options.sizeMib ?? Math.max(usedMib + 256, Math.ceil(usedMib * 1.2));
    const partial = join(work, 'image.ext4');
    run('mkfs.ext4', ['-q', '-F', '-L', 'rootfs', '-d', root, partial, `${sizeMib}M`]);
    renameSync(partial, output);
    process.stdout.write(`${output}: ${sizeMib} MiB ext4, ${usedMib} MiB of files, started by ${installed.init}, default user ${installed.defaultUser}\n`);
  } finally {
    cleanUp();
  }
}

try {
  main();
} catch (error) {
  process.stderr.write(`image-to-template: ${error.message}\n`);
  process.exit(error instanceof BadInput || error instanceof LayerError || error instanceof InRootError ? 2 : 1);
}
