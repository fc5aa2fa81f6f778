#!/usr/bin/env node
// Installs envd into a root filesystem directory (rootfs/install.sh runs this;
// image-to-template.mjs imports it): the launcher as /usr/local/bin/envd, its
// runtime (Node, the loader and libraries it links) and envd-init under
// /usr/local/lib/envd, its settings, and the way the image starts it (--init):
//   systemd    the unit, enabled by symlink (no systemctl or chroot needed)
//   openrc     /etc/init.d/envd, added to the default runlevel by symlink
//   busybox    a respawn line in /etc/inittab (busybox init restarts envd)
//   envd-init  /sbin/init -> envd-init (the image's own /sbin/init kept as /sbin/init.image)
//   auto       (default) systemd if the image has it, else OpenRC, else envd-init
// The default user is --default-user, else `user` if the image's /etc/passwd has
// it, else root; the choice is printed.
//
// The root is an image's, so an attacker's: every path is resolved inside it
// (in-root.mjs), its symlinks read as the image's kernel will read them, and
// never followed to the build host. An image with `sbin -> /sbin` gets envd-init
// in its own /sbin. Exit status 2 for bad input (no such root, no /etc/passwd,
// a user missing from it, a path the image makes unusable).
import { cpSync, existsSync, lstatSync, readlinkSync, renameSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { copyFileInRoot, ensureDirInRoot, InRootError, isExecutableInRoot, placeTreeInRoot, readFileInRoot, removeEntry, resolveInRoot, symlinkInRoot, writeFileInRoot } from './in-root.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const DIST = join(HERE, '..', 'dist');
const USAGE = 'usage: install.sh ROOTFS_DIR [--default-user USER] [--init auto|systemd|openrc|busybox|envd-init]';
const INITS = ['auto', 'systemd', 'openrc', 'busybox', 'envd-init'];
const ENVD_INIT = '/usr/local/lib/envd/envd-init';
const INITTAB_LINE = '::respawn:/usr/local/bin/envd';

export class BadInput extends Error {}

/** The users of the image's /etc/passwd (read inside the root); undefined without one. */
function imageUsers(root) {
  const passwd = readFileInRoot(root, '/etc/passwd');
  return passwd === undefined ? undefined : new Set(passwd.split('\n').map((line) => line.split(':')[0]).filter(Boolean));
}

/**
 * The default user: the one asked for (it must be in the image), else `user`
 * where the image has it (the sandbox convention), else root (busybox, Alpine
 * and most images have no `user`). Returns the name and why.
 */
export function chooseDefaultUser(root, asked) {
  const users = imageUsers(root);
  if (!users) throw new BadInput(`${root} has no /etc/passwd: envd needs it to know the image's users`);
  if (asked !== undefined) {
    if (!users.has(asked)) throw new BadInput(`the default user ${asked} is not in ${root}/etc/passwd`);
    return { user: asked, why: 'asked for' };
  }
  return users.has('user') ? { user: 'user', why: 'the image has a user account' } : { user: 'root', why: 'the image has no user account' };
}

function chooseInit(root, init) {
  if (!INITS.includes(init)) throw new BadInput(`unknown --init ${init}; ${USAGE}`);
  if (init !== 'auto') return init;
  if (['/lib/systemd/systemd', '/usr/lib/systemd/systemd'].some((path) => isExecutableInRoot(root, path))) return 'systemd';
  if (['/sbin/openrc', '/sbin/openrc-run', '/usr/sbin/openrc'].some((path) => isExecutableInRoot(root, path))) return 'openrc';
  return 'envd-init';
}

/**
 * Installs envd into `root`. `log` gets one line per decision. Returns what it
 * chose: `{ defaultUser, init }`. Throws BadInput for bad input.
 */
export function installEnvd(root, { defaultUser: asked, init: askedInit = 'auto' } = {}, log = () => {}) {
  for (const file of ['envd', 'envd-init', 'runtime/envd-node', 'runtime/lib/ld.so']) {
    if (!existsSync(join(DIST, file))) throw new Error(`${join(DIST, file)} missing; run node build.mjs first`);
  }
  // ROOT itself is the operator's choice (it may be a link to the tree); what is inside it is the image's.
  if (!statSync(root, { throwIfNoEntry: false })?.isDirectory()) throw new BadInput(`${root} is not a directory`);
  try {
    const { user: defaultUser, why } = chooseDefaultUser(root, asked);
    log(`default user ${defaultUser} (${why})`);
    const init = chooseInit(root, askedInit);

    copyFileInRoot(root, '/usr/local/bin/envd', join(DIST, 'envd'), 0o755);
    ensureDirInRoot(root, '/usr/local/lib/envd', log);
    placeTreeInRoot(root, '/usr/local/lib/envd/runtime', (path) => {
      cpSync(join(DIST, 'runtime'), path, { recursive: true, verbatimSymlinks: true, preserveTimestamps: true, errorOnExist: true, force: false, filter: (source) => !source.endsWith('.inputs') });
    });
    copyFileInRoot(root, ENVD_INIT, join(DIST, 'envd-init'), 0o755);
    // The token file is on /run (tmpfs): absent at boot, so envd starts uninitialised and the
    // orchestrator's first POST /init sets the token and writes it there (0600). An envd that
    // is restarted reads it back, so /init never reopens; a memory snapshot keeps it, a
    // reboot clears it. The orchestrator may also write it before envd starts.
    writeFileInRoot(root, '/etc/envd/envd.env', `ENVD_DEFAULT_USER=${defaultUser}\nENVD_LOG_LEVEL=info\nENVD_ACCESS_TOKEN_FILE=/run/envd/token\n`, 0o644);

    if (init === 'systemd') {
      copyFileInRoot(root, '/etc/systemd/system/envd.service', join(HERE, 'envd.service'), 0o644);
      symlinkInRoot(root, '/etc/systemd/system/multi-user.target.wants/envd.service', '/etc/systemd/system/envd.service');
    } else if (init === 'openrc') {
      copyFileInRoot(root, '/etc/init.d/envd', join(HERE, 'envd.openrc'), 0o755);
      symlinkInRoot(root, '/etc/runlevels/default/envd', '/etc/init.d/envd');
    } else if (init === 'busybox') {
      // busybox init mounts nothing itself: envd-init's mounts come from the image's rcS.
      const inittab = readFileInRoot(root, '/etc/inittab') ?? '';
      if (!inittab.split('\n').includes(INITTAB_LINE)) {
        const found = resolveInRoot(root, '/etc/inittab');
        // Written where the image's /etc/inittab leads (inside the root), or as a new file.
        const where = found.missing ? '/etc/inittab' : found.path.slice(root.length);
        writeFileInRoot(root, where, `${inittab}${inittab === '' || inittab.endsWith('\n') ? '' : '\n'}${INITTAB_LINE}\n`, found.missing ? 0o644 : found.stat.mode & 0o7777);
      }
    } else {
      const sbin = ensureDirInRoot(root, '/sbin', log);
      const current = lstatSync(join(sbin, 'init'), { throwIfNoEntry: false });
      if (current && !(current.isSymbolicLink() && readlinkSync(join(sbin, 'init')) === ENVD_INIT)) {
        removeEntry(sbin, 'init.image');
        renameSync(join(sbin, 'init'), join(sbin, 'init.image'));
      }
      symlinkInRoot(root, `${sbin.slice(root.length)}/init`, ENVD_INIT);
    }
    return { defaultUser, init };
  } catch (error) {
    if (error instanceof InRootError) throw new BadInput(`the image's ${error.message}`);
    throw error;
  }
}

function parseArgs(argv) {
  if (argv.length < 1) throw new BadInput(USAGE);
  const [root, ...rest] = argv;
  const options = { init: 'auto' };
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i];
    const value = () => {
      if (i + 1 >= rest.length) throw new BadInput(`${arg} needs a value`);
      return rest[++i];
    };
    if (arg === '--default-user') options.defaultUser = value();
    else if (arg === '--init') options.init = value();
    else throw new BadInput(`unknown option ${arg}; ${USAGE}`);
  }
  return { root: resolve(root), options };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const { root, options } = parseArgs(process.argv.slice(2));
    const { init } = installEnvd(root, options, (line) => process.stdout.write(`install.sh: ${line}\n`));
    process.stdout.write(`install.sh: envd installed into ${root}, started by ${init}\n`);
  } catch (error) {
    process.stderr.write(`install.sh: ${error.message}\n`);
    process.exit(error instanceof BadInput ? 2 : 1);
  }
}
