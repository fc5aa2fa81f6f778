// `npm start`: build envd and run it for local use on 127.0.0.1:49983 as the
// current user, with a fresh token in a 0600 file, and print a curl line.
//
// A second `npm start` must not break the first: before it touches anything
// (the build, the token, the state dir) it refuses when the port is taken or
// when .local's state is in use by a live envd (.local/envd.lock holds the pid
// of the npm start that runs it), saying which; the running instance keeps its token.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import pkg from '../package.json' with { type: 'json' };

const dir = join(process.cwd(), '.local');
const tokenFile = join(dir, 'token');
const lockFile = join(dir, 'envd.lock');
const port = process.env.ENVD_PORT ?? '49983';

function refuse(why) {
  process.stderr.write(`npm start: ${why}\n`);
  process.exit(1);
}

/** The pid of the live envd that holds .local's lock, if one does (a lock left by one that died is stale). */
function lockHolder() {
  let pid;
  try {
    pid = Number(JSON.parse(readFileSync(lockFile, 'utf8')).pid);
  } catch {
    return undefined;
  }
  try {
    // Alive and an npm start of envd (a pid reused by anything else is not ours).
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('start-local') ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Whether something listens on 127.0.0.1:port already (envd would die with EADDRINUSE only after adopting .local's commands). */
function portTaken() {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', (error) => resolve(error.code === 'EADDRINUSE'));
    probe.listen(Number(port), '127.0.0.1', () => probe.close(() => resolve(false)));
  });
}

/** Takes .local's lock for this process, atomically (two npm starts at once: one wins); a stale one is replaced. */
function lock() {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (let attempt = 0; attempt < 2; attempt++) {
    const holder = lockHolder();
    if (holder !== undefined) refuse(`${dir} is in use by a running envd (npm start pid ${holder}); its token stays in ${tokenFile}. Stop it first (kill ${holder}), or run this from another clone.`);
    try {
      writeFileSync(lockFile, `${JSON.stringify({ pid: process.pid, port: Number(port) })}\n`, { mode: 0o600, flag: 'wx' });
      return;
    } catch (error) {
      if (error.code !== 'EEXIST') throw error;
      if (lockHolder() === undefined) rmSync(lockFile, { force: true });
    }
  }
  refuse(`${lockFile} could not be taken: remove it if no npm start runs`);
}

lock();
process.on('exit', () => rmSync(lockFile, { force: true }));
if (await portTaken()) refuse(`port ${port} on 127.0.0.1 is taken; nothing was changed (${tokenFile} is as it was). Stop what listens there, or choose another: ENVD_PORT=49984 npm start`);

const build = spawnSync(process.execPath, ['build.mjs'], { stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);

writeFileSync(tokenFile, randomBytes(24).toString('hex'), { mode: 0o600 });

process.stderr.write(
  `\nenvd: token in ${tokenFile}. Try:\n\n` +
    `curl -s -H "Authorization: Bearer $(cat ${tokenFile})" -H 'content-type: application/json' -d '{"cmd":"echo hello from envd"}' http://127.0.0.1:${port}/commands\n\n`,
);
// State and spool beside the token, not the system's /run/envd and /var/lib/envd of a root install.
const dirArgs = ['--state-dir', join(dir, 'state'), '--spool-dir', join(dir, 'spool')];
const envd = spawn(process.execPath, [...pkg.envd.nodeFlags, 'dist/envd.js', '--host', '127.0.0.1', '--port', port, '--access-token-file', tokenFile, ...dirArgs], {
  stdio: 'inherit',
  env: { ...process.env, ...pkg.envd.env },
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => envd.kill('SIGTERM'));
envd.on('exit', (code) => process.exit(code ?? 0));
