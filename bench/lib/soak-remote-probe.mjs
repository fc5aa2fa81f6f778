// The soak's probe of an envd on another machine (a qemu guest): what
// bench/lib/soak-probe.mjs reads from /proc of a local envd, read inside that
// machine by a perl script run as root through envd's own POST /commands
// (soak-guest-probe.pl), with memory sampled every 100 ms there by a
// background command (soak-guest-sampler.pl) so peaks between two probes are
// not missed. Both scripts are uploaded next to the workload's files.
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { send } from './client.mjs';

const SCRIPTS = ['soak-guest-sampler.pl', 'soak-guest-probe.pl'];

async function upload(envd, path, text) {
  const bytes = Buffer.from(text);
  const reply = await send(envd, 'PUT', `/files/raw?path=${encodeURIComponent(path)}`, {
    body: Readable.from([bytes]),
    headers: { 'content-type': 'application/octet-stream', 'content-length': bytes.length },
  });
  if (reply.status !== 200) throw new Error(`upload of ${path} answered ${reply.status}: ${reply.body.slice(0, 200)}`);
}

/** Runs perl with `args` as root, as a program (`args`): no login shell, so no profile that may stall (root's runs pyenv here). */
async function perlAsRoot(envd, args, extra = {}) {
  const { status, body } = await send(envd, 'POST', '/commands', { body: { cmd: 'perl', args: args.map(String), user: 'root', ...extra } });
  if (status !== 200) throw new Error(`POST /commands (perl ${args.join(' ').slice(0, 80)}) answered ${status}: ${body.slice(0, 200)}`);
  return JSON.parse(body);
}

/**
 * Starts the sampler of envd `pid` (its pid in its own machine) and returns
 * `sample()`: envd's memory now, its peak and low since the last sample,
 * descriptors by kind, processes and what it keeps on disk, as the local
 * probe reports them. `dir` is a directory of that machine for the scripts.
 */
export async function startRemoteProbe(envd, { pid, stateDir, spoolDir, dir }) {
  const here = new URL('./', import.meta.url);
  for (const name of SCRIPTS) await upload(envd, `${dir}/${name}`, readFileSync(new URL(name, here), 'utf8'));
  const log = `${dir}/soak-memory.log`;
  const { pid: samplerPid } = await perlAsRoot(envd, [`${dir}/soak-guest-sampler.pl`, pid, log], { background: true });
  let offset = 0;
  return {
    samplerPid,
    async sample() {
      const result = await perlAsRoot(envd, [`${dir}/soak-guest-probe.pl`, pid, stateDir, spoolDir, log, offset]);
      if (result.exit_code !== 0) throw new Error(`the guest probe exited ${result.exit_code}: ${result.stderr.slice(0, 300)}`);
      const figures = JSON.parse(result.stdout);
      offset = figures.offset;
      return figures;
    },
    async stop() {
      await send(envd, 'DELETE', `/commands/${samplerPid}`);
    },
  };
}
