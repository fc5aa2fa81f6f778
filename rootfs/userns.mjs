// The image converter's privilege drop (issue 36): the conversion runs in a user
// namespace whose root is an unprivileged host id, so the image's uids and gids
// (0..65535) are real owners as seen inside it, `tar -x` and `mkfs.ext4 -d`
// record them as the image says, and a layer that got past the in-root checks
// (in-root.mjs, layers.mjs) could only reach files that range owns: on the build
// host it is nobody's, with no capability there.
//
//   as root:      image root = host ROOT_RANGE_BASE, written to /proc/PID/uid_map
//                 and gid_map by this (root) parent; no /etc/subuid needed.
//   a plain user: image root = the user, 1..65535 = the user's first subordinate
//                 range of /etc/subuid and /etc/subgid, through shadow's
//                 newuidmap/newgidmap (the only way an unprivileged parent may map
//                 more than its own id).
//
// util-linux 2.38's `unshare --map-users` runs newuidmap even for root, so the
// maps are written here instead: `unshare --user --keep-caps` makes the
// namespace and keeps the capabilities it grants across exec, a fixed sh script
// says "made" on fd 3 and waits on fd 4 while the parent writes the maps, then
// setpriv becomes the namespace's root (host: the range's base) and drops every
// supplementary group before the real command runs. Until then the child runs
// only that script.
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';

/**
 * The host uid and gid of image root when root converts: the start of systemd's
 * "foreign UID range" (0x7FFF0000-0x7FFFFFFF), which no account and no
 * /etc/subuid range on a normal host owns.
 */
export const ROOT_RANGE_BASE = 0x7fff0000;
/** Ids mapped into the namespace: an image owner beyond 65535 cannot be created there (the layer is refused). */
export const RANGE_SIZE = 65536;

const HANDSHAKE = 'printf x >&3 && read go <&4 && exec 3>&- 4<&- && exec setpriv --reuid=0 --regid=0 --clear-groups -- "$@"';

/** No user namespace here; `message` says why. */
export class NamespaceUnavailable extends Error {}

/** The first range of at least `size - 1` ids that `file` (/etc/subuid or /etc/subgid) gives `name` or `id`. */
function subordinateRange(file, name, id) {
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    const [owner, start, count] = line.trim().split(':');
    if ((owner === name || owner === String(id)) && Number(count) >= RANGE_SIZE - 1) return Number(start);
  }
  return undefined;
}

const hasProgram = (program) => spawnSync('sh', ['-c', `command -v ${program}`], { stdio: 'ignore' }).status === 0;

/**
 * How this process can map a namespace: `{ describe, owner, writeMaps(pid) }`
 * (`owner` is the host uid/gid of the namespace's root, which must own the work
 * directory), or throws NamespaceUnavailable.
 */
export function planNamespace() {
  for (const program of ['unshare', 'setpriv']) {
    if (!hasProgram(program)) throw new NamespaceUnavailable(`${program} (util-linux) is not installed`);
  }
  const uid = process.getuid();
  const gid = process.getgid();
  if (uid === 0) {
    return {
      describe: `image root is host uid/gid ${ROOT_RANGE_BASE}, image ids 0-${RANGE_SIZE - 1} are host ${ROOT_RANGE_BASE}-${ROOT_RANGE_BASE + RANGE_SIZE - 1}`,
      owner: { uid: ROOT_RANGE_BASE, gid: ROOT_RANGE_BASE },
      writeMaps(pid) {
        writeFileSync(`/proc/${pid}/uid_map`, `0 ${ROOT_RANGE_BASE} ${RANGE_SIZE}\n`);
        writeFileSync(`/proc/${pid}/gid_map`, `0 ${ROOT_RANGE_BASE} ${RANGE_SIZE}\n`);
      },
    };
  }
  const name = userInfo().username;
  const subUid = subordinateRange('/etc/subuid', name, uid);
  const subGid = subordinateRange('/etc/subgid', name, gid);
  if (subUid === undefined || subGid === undefined) throw new NamespaceUnavailable(`${name} has no range of ${RANGE_SIZE - 1} ids in /etc/subuid and /etc/subgid`);
  if (!hasProgram('newuidmap') || !hasProgram('newgidmap')) throw new NamespaceUnavailable('newuidmap/newgidmap (the uidmap package) are not installed');
  return {
    describe: `image root is ${name}, image ids 1-${RANGE_SIZE - 1} are host ${subUid}-${subUid + RANGE_SIZE - 2} (gids ${subGid}-)`,
    owner: { uid, gid },
    writeMaps(pid) {
      for (const [program, own, sub] of [['newuidmap', uid, subUid], ['newgidmap', gid, subGid]]) {
        const result = spawnSync(program, [String(pid), '0', String(own), '1', '1', String(sub), String(RANGE_SIZE - 1)], { encoding: 'utf8' });
        if (result.status !== 0) throw new Error(`${program}: ${(result.stderr || result.error?.message || '').trim()}`);
      }
    },
  };
}

/**
 * Runs `argv` as root of a new user namespace mapped by `plan`, in `cwd`, with
 * `stdin`; stdout is the caller's, stderr too. Resolves `{ status, signal }` when
 * it exits; rejects with NamespaceUnavailable when the namespace cannot be made
 * (unshare refused, the maps refused), before `argv` ever ran.
 */
export function runInNamespace(plan, argv, { cwd, stdin = 'ignore' }) {
  return new Promise((resolve, reject) => {
    const child = spawn('unshare', ['--user', '--keep-caps', '--', 'sh', '-c', HANDSHAKE, 'sh', ...argv], { cwd, stdio: [stdin, 'inherit', 'pipe', 'pipe', 'pipe'] });
    let made = false;
    let said = '';
    child.stderr.on('data', (chunk) => {
      if (!made) said += chunk;
      else process.stderr.write(chunk);
    });
    child.on('error', (error) => reject(new NamespaceUnavailable(`unshare: ${error.message}`)));
    child.stdio[3].once('data', () => {
      try {
        plan.writeMaps(child.pid);
      } catch (error) {
        child.kill('SIGKILL');
        reject(new NamespaceUnavailable(`the id maps were refused: ${error.message}`));
        return;
      }
      made = true;
      child.stdio[4].end('go\n');
    });
    child.on('close', (status, signal) => {
      if (!made) reject(new NamespaceUnavailable(said.trim() || `unshare exited ${status ?? signal}`));
      else resolve({ status, signal });
    });
  });
}
