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
//
// --userns auto (default) runs the conversion (convert.mjs: unpacking, layers,
// install, mkfs) as the root of a user namespace whose ids are an unprivileged
// host range (userns.mjs); without user namespaces it warns and converts in this
// process, relying on in-root resolution alone. --userns require refuses then
// (exit 1); --userns off always converts in this process.
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdtempSync, openSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { convertInWork, IMAGE_NAME, isBadInput, SUMMARY_NAME } from './convert.mjs';
import { BadInput } from './install.mjs';
import { NamespaceUnavailable, planNamespace, runInNamespace } from './userns.mjs';

const CONVERT = join(dirname(fileURLToPath(import.meta.url)), 'convert.mjs');
const USAGE = 'usage: image-to-template.mjs IMAGE OUTPUT.ext4 [--default-user USER] [--init auto|systemd|openrc|busybox|envd-init] [--entrypoint | --entrypoint-once] [--size-mib N] [--userns auto|require|off]';
const USERNS_MODES = ['auto', 'require', 'off'];

function parseArgs(argv) {
  const options = { defaultUser: undefined, init: 'auto', entrypoint: undefined, sizeMib: undefined, userns: 'auto', positional: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new BadInput(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--default-user') options.defaultUser = value();
    else if (arg === '--init') options.init = value();
    else if (arg === '--userns') {
      options.userns = value();
      if (!USERNS_MODES.includes(options.userns)) throw new BadInput(`--userns must be one of ${USERNS_MODES.join(', ')}`);
    } else if (arg === '--entrypoint') options.entrypoint = 'service';
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

/** Entries of a tar archive (compression detected by tar); a file that is no archive is bad input. */
function listTar(archive) {
  const result = spawnSync('tar', ['-tf', archive], { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] });
  if (result.error) throw result.error;
  if (result.status !== 0) throw new BadInput(`${archive} is not a tar archive (${result.stderr.trim().split('\n')[0]})`);
}

const say = (line) => process.stdout.write(`image-to-template: ${line}\n`);

/** The namespace plan for --userns, or undefined to convert in this process (said so when it is a fallback). */
function chooseNamespace(mode) {
  if (mode === 'off') return undefined;
  try {
    return planNamespace();
  } catch (error) {
    return fallBack(mode, error);
  }
}

/** No namespace after all (`error` says why): --userns require refuses, auto warns and goes on in this process. */
function fallBack(mode, error) {
  if (!(error instanceof NamespaceUnavailable)) throw error;
  if (mode === 'require') throw Object.assign(new Error(`no user namespace (${error.message}); --userns require refuses to convert without one`), { exitStatus: 1 });
  process.stderr.write(`image-to-template: warning: no user namespace (${error.message}): converting as ${process.getuid() === 0 ? 'root' : 'this user'}, relying on in-root resolution alone\n`);
  return undefined;
}

/**
 * Runs convert.mjs as root of the namespace in `work`, the image on its stdin (a
 * directory as a tar stream that this process makes: the namespace cannot read a
 * root-owned tree). Returns its exit status.
 */
async function convertInNamespace(plan, work, image, isDirectory, options) {
  chownSync(work, plan.owner.uid, plan.owner.gid);
  const tree = isDirectory ? spawn('tar', ['-cf', '-', '--numeric-owner', '-C', image, '.'], { stdio: ['ignore', 'pipe', 'inherit'] }) : undefined;
  // 'exit', not 'close': its stdout is the namespace's stdin, never read (so never ended) here.
  const treeDone = tree && new Promise((resolve) => tree.on('exit', resolve));
  const fd = isDirectory ? undefined : openSync(image, 'r');
  try {
    const { defaultUser, init, entrypoint, sizeMib } = options;
    const argv = [process.execPath, CONVERT, JSON.stringify({ kind: isDirectory ? 'tree' : 'tar', defaultUser, init, entrypoint, sizeMib })];
    const running = runInNamespace(plan, argv, { cwd: work, stdin: tree ? tree.stdout : fd });
    tree?.stdout.destroy(); // the child has its own copy: tar -c sees EPIPE, not a stall, if the child dies
    const { status, signal } = await running;
    if (tree && (await treeDone) !== 0 && status === 0) throw new Error(`tar -c of ${image} failed`);
    return status ?? (signal ? 1 : 0);
  } finally {
    if (fd !== undefined) closeSync(fd);
    tree?.kill();
  }
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const [image, output] = options.positional.map((p) => resolve(p));
  if (!existsSync(image)) throw new BadInput(`${image} does not exist`);
  if (!existsSync(dirname(output))) throw new BadInput(`the directory of ${output} does not exist`);
  const isDirectory = statSync(image).isDirectory();
  if (!isDirectory) listTar(image); // bad input before anything else
  let plan = chooseNamespace(options.userns);
  const work = mkdtempSync(join(dirname(output), `.${basename(output)}.work-`));
  const cleanUp = () => rmSync(work, { recursive: true, force: true });
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => (cleanUp(), process.exit(1)));
  try {
    let isolation = 'in a user namespace';
    if (plan) {
      say(`converting in a user namespace: ${plan.describe}`);
      try {
        const status = await convertInNamespace(plan, work, image, isDirectory, options);
        if (status !== 0) return status; // convert.mjs said why
      } catch (error) {
        // The kernel or the maps refused (unshare: Operation not permitted): nothing ran in it yet.
        plan = fallBack(options.userns, error);
      }
    }
    if (!plan) {
      const fd = isDirectory ? undefined : openSync(image, 'r');
      try {
        convertInWork(work, isDirectory ? { dir: image } : { fd, kind: 'tar' }, options, say);
      } finally {
        if (fd !== undefined) closeSync(fd);
      }
      isolation = 'in-root resolution only';
    }
    const summary = JSON.parse(readFileSync(join(work, SUMMARY_NAME), 'utf8'));
    const built = join(work, IMAGE_NAME);
    chownSync(built, process.getuid(), process.getgid());
    renameSync(built, output);
    process.stdout.write(`${output}: ${summary.sizeMib} MiB ext4, ${summary.usedMib} MiB of files, started by ${summary.init}, default user ${summary.defaultUser} (${isolation})\n`);
    return 0;
  } finally {
    cleanUp();
  }
}

try {
  process.exitCode = await main();
} catch (error) {
  process.stderr.write(`image-to-template: ${error.message}\n`);
  process.exitCode = error.exitStatus ?? (isBadInput(error) ? 2 : 1);
}
