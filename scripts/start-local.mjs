// `npm start`: build envd and run it for local use on 127.0.0.1:49983 as the
// current user, with a fresh token in a 0600 file, and print a curl line.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pkg from '../package.json' with { type: 'json' };

const build = spawnSync(process.execPath, ['build.mjs'], { stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);

const dir = join(process.cwd(), '.local');
mkdirSync(dir, { recursive: true, mode: 0o700 });
const tokenFile = join(dir, 'token');
writeFileSync(tokenFile, randomBytes(24).toString('hex'), { mode: 0o600 });

const port = process.env.ENVD_PORT ?? '49983';
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
