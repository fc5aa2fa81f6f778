import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/proc.js';
import { holderMemory, parseLog, readLog, readStatus, startHolder, startTime, useHolders, type RunningHolder } from '../helpers/holder.js';

useHolders();

const O_CLOEXEC = 0o2000000;

const finished = async (holder: RunningHolder) => {
  expect(await holder.exited).toBe(0);
  return { status: readStatus(holder.dir)!, log: parseLog(readLog(holder.dir)) };
};

describe('envd-holder start', () => {
  it('writes the pid file with both processes\' /proc start times and prints the same record as "ready <record>"', async () => {
    const holder = await startHolder({ command: ['sleep', '30'] });
    const [shellPid, shellStart, holderPid, holderStart] = readFileSync(join(holder.dir, 'pid'), 'utf8').trimEnd().split(' ').map(Number);
    expect(readFileSync(join(holder.dir, 'pid'), 'utf8')).toMatch(/^\d+ \d+ \d+ \d+\n$/);
    expect(shellPid).toBe(holder.shellPid);
    expect(holderPid).toBe(holder.holderPid);
    expect(shellStart).toBe(startTime(holder.shellPid));
    expect(holderStart).toBe(startTime(holder.holderPid));
    expect(holder.readyLine).toBe(`ready ${readFileSync(join(holder.dir, 'pid'), 'utf8').trimEnd()}`);
    // The shell leads its own session (so a kill of its group reaches all it starts); the holder is not in it.
    const shellStat = readFileSync(`/proc/${holder.shellPid}/stat`, 'utf8');
    const [ppid, pgid, sid] = shellStat.slice(shellStat.lastIndexOf(')') + 2).split(' ').slice(1, 4).map(Number);
    expect({ ppid, pgid, sid }).toEqual({ ppid: holder.holderPid, pgid: holder.shellPid, sid: holder.shellPid });
    expect(existsSync(join(holder.dir, 'sock'))).toBe(true);
    expect(readStatus(holder.dir)).toBeUndefined();
    process.kill(holder.shellPid, 'SIGKILL');
    await finished(holder);
  });

  it('lets go of envd\'s pipes after the ready line and marks every fd of its own close-on-exec', async () => {
    const holder = await startHolder({ command: ['sleep', '30'] });
    // Right after the ready line it points 0, 1 and 2 at /dev/null.
    await waitFor(() => [0, 1, 2].every((fd) => readlinkSync(`/proc/${holder.holderPid}/fd/${fd}`) === '/dev/null'), 5_000, 'fds 0-2 on /dev/null');
    const fds = readdirSync(`/proc/${holder.holderPid}/fd`).map(Number);
    for (const fd of fds.filter((fd) => fd > 2)) {
      const flags = Number.parseInt(/flags:\s+(\d+)/.exec(readFileSync(`/proc/${holder.holderPid}/fdinfo/${fd}`, 'utf8'))![1]!, 8);
      expect(flags & O_CLOEXEC, `fd ${fd} -> ${readlinkSync(`/proc/${holder.holderPid}/fd/${fd}`)}`).toBe(O_CLOEXEC);
    }
    // signalfd, socket, segments, status.tmp, two pipes and the three /dev/null: nothing per byte or per client.
    expect(fds.length).toBeLessThanOrEqual(10);
    const memory = holderMemory(holder.holderPid);
    console.log(`envd-holder idle: VmRSS ${memory.rssKiB} KiB (RssAnon ${memory.anonKiB} KiB), ${fds.length} fds`);
    process.kill(holder.shellPid, 'SIGKILL');
    await finished(holder);
  });

  it('gives the command only fds 0, 1 and 2, and the holder\'s cwd and environment unchanged', async () => {
    const holder = await startHolder({
      command: ['sh', '-c', 'ls /proc/$$/fd; pwd; echo "$GREETING|$PATH"; env | wc -l'],
      env: { GREETING: 'hello there', PATH: '/usr/bin:/bin' },
    });
    const { status, log } = await finished(holder);
    expect(status.exitCode).toBe(0);
    const count = log.stdout.toString().trimEnd().split('\n').at(-1);
    expect(log.stdout.toString()).toBe(`0\n1\n2\n${holder.root}\nhello there|/usr/bin:/bin\n${count}\n`);
    // sh adds PWD (and may add SHLVL, _): nothing of the holder's own leaks in.
    expect(Number(count)).toBeLessThanOrEqual(5);
    expect(log.stderr.toString()).toBe('');
  });

  it('gives the command the default OOM score whatever the holder inherited', async () => {
    // envd runs at -1000; this sandbox lacks CAP_SYS_RESOURCE to go below 0, so the holder inherits 500 here.
    const holder = await startHolder({
      command: ['cat', '/proc/self/oom_score_adj'],
      launcher: ['sh', '-c', 'echo 500 > /proc/self/oom_score_adj && exec "$0" "$@"'],
    });
    expect(readFileSync(`/proc/${holder.holderPid}/oom_score_adj`, 'utf8')).toBe('500\n');
    const { log } = await finished(holder);
    expect(log.stdout.toString()).toBe('0\n');
  });

  it('reports an exec failure as exit code 127 with the reason in stderr', async () => {
    const holder = await startHolder({ command: ['/nonexistent/program', 'arg'] });
    const { status, log } = await finished(holder);
    expect(status).toEqual({ exitCode: 127, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: expect.any(Number) });
    expect(log.stderr.toString()).toBe('envd-holder: cannot run /nonexistent/program: No such file or directory (ENOENT)\n');
    expect(log.stdout.length).toBe(0);
  });

  it('writes status, removes its socket and exits 0 once the output is complete', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'echo bye; exit 6'] });
    const { status, log } = await finished(holder);
    expect(status).toEqual({ exitCode: 6, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: readLog(holder.dir).length });
    expect(log.stdout.toString()).toBe('bye\n');
    expect(existsSync(join(holder.dir, 'sock'))).toBe(false);
    expect(readdirSync(holder.dir).sort()).toEqual(['log.0', 'offsets', 'pid', 'segments', 'status']);
    // The offsets file: bytes written to stdout and stderr, then bytes kept of each (u64 LE).
    const offsets = readFileSync(join(holder.dir, 'offsets'));
    expect([0, 1, 2, 3].map((i) => Number(offsets.readBigUInt64LE(i * 8)))).toEqual([4, 0, 4, 0]);
  });

  it('answers "error <message>" and exits 1 when it cannot start', async () => {
    await expect(startHolder({ command: [] })).rejects.toThrow(/^envd-holder did not start: error no command after --$/);
    await expect(startHolder({ command: ['true'], pty: { cols: 0, rows: 10 } })).rejects.toThrow(/error --pty needs <cols>x<rows>, got 0x10/);
  });

  it('measures spawn to ready', async () => {
    const times: number[] = [];
    for (let i = 0; i < 20; i++) {
      const holder = await startHolder({ command: ['true'] });
      times.push(holder.readyMs);
      await finished(holder);
    }
    times.sort((a, b) => a - b);
    console.log(`envd-holder spawn -> ready: median ${times[10]!.toFixed(2)} ms, min ${times[0]!.toFixed(2)} ms, max ${times.at(-1)!.toFixed(2)} ms (20 runs, includes Node's spawn)`);
    expect(times).toHaveLength(20);
  });
});
