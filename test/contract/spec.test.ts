// The public spec, row by row (issue 37). Every field, status and error text that
// `sandbox-service-spec.md` states for the command group (§4 "Command group", with
// CommandResult and BackgroundProcess of §2, the events of §6, the statuses of §7 and the
// limits of §8) and for the filesystem group (§4 "Filesystem group", File entry info of §2),
// checked against a real envd over HTTP, so that no change drifts from the spec unseen.
//
// One row per statement: `line` is the spec's line, `says` quotes it, `check` proves it.
// The control plane strips `/sandboxes/{sandbox_id}` and passes everything else through
// (envd-api.md, first paragraph), so the spec's paths are envd's without that prefix.
// Where the spec leaves a detail to envd ("not shown"), envd-api.md decides and the row
// cites it as `envd-api`.
import { execFileSync } from 'node:child_process';
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
import { postJsonOverLimit, putDeclaredOverLimit } from '../helpers/oversized.js';
import { findProcesses, waitFor } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { collectEvents, readEvents } from '../helpers/sse.js';
import type { UnixUser } from '../../src/users.js';

interface Row {
  /** The line of sandbox-service-spec.md (or `envd-api` where the spec leaves it to envd). */
  line: number | 'envd-api';
  /** What that line says, quoted or closely paraphrased. */
  says: string;
  check: () => Promise<void>;
}

let envd: TestServer;
let user: UnixUser;
let removeUser = () => {};
let dir: string;
beforeAll(async () => {
  const made = await commandUser();
  user = made.user;
  removeUser = made.remove;
  envd = await startServer({ defaultUser: user.name });
  dir = mkdtempSync(join(tmpdir(), 'envd-spec-'));
  // The scratch directory is the command user's, as its home would be.
  if (process.getuid?.() === 0) execFileSync('chown', [`${user.uid}:${user.gid}`, dir]);
});
afterAll(async () => {
  await envd?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  removeUser();
});

const json = (method: string, path: string, body?: unknown) => envd.json(method, path, body);
const q = (path: string) => `path=${encodeURIComponent(path)}`;
const sh = (cmd: string, more: Record<string, unknown> = {}) => json('POST', '/commands', { cmd, ...more });
const background = async (cmd: string, more: Record<string, unknown> = {}): Promise<number> => {
  const { status, body } = await sh(cmd, { background: true, ...more });
  expect(status, JSON.stringify(body)).toBe(200);
  return body.pid;
};
/** §7: "Body shape: `{ message: string }`" — every error row checks it too. */
const expectError = (answer: { status: number; body: any }, status: number, message?: RegExp) => {
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
  expect(answer.body).toEqual({ message: expect.any(String) });
  if (message) expect(answer.body.message).toMatch(message);
};
const NOT_FOUND_RESULT = { stdout: '', stderr: 'process not found', exit_code: 1 };
let seq = 0;
const fresh = (name: string) => join(dir, `${++seq}-${name}`);

const commandGroup: Row[] = [
  // §2 CommandResult, BackgroundProcess; §4 POST /commands
  {
    line: 68,
    says: 'CommandResult: stdout string "Full standard output", stderr string "Full standard error", exit_code integer "0 means success"',
    check: async () => {
      const { status, body } = await sh('echo out; echo err >&2; exit 3');
      expect(status).toBe(200);
      expect(body).toMatchObject({ stdout: 'out\n', stderr: 'err\n', exit_code: 3 });
      expect((await sh('true')).body.exit_code).toBe(0);
      const big = (await sh('seq 1 100000')).body.stdout as string;
      expect(big.split('\n')).toHaveLength(100_001);
    },
  },
  {
    line: 159,
    says: 'cmd | string | Required; shell command',
    check: async () => {
      expectError(await json('POST', '/commands', {}), 400, /cmd/);
      expectError(await json('POST', '/commands', { cmd: 42 }), 400, /cmd/);
      expect((await sh('echo $((6 * 7)) | tr 4 X')).body.stdout).toBe('X2\n');
    },
  },
  {
    line: 160,
    says: 'background | boolean | Default false; true returns immediately with a pid',
    check: async () => {
      expect((await sh('sleep 0.2; echo done')).body).toMatchObject({ stdout: 'done\n', exit_code: 0 });
      const { status, body } = await sh('sleep 30', { background: true });
      expect(status).toBe(200);
      // §2 BackgroundProcess: { pid: integer }; the command is still running when it answers.
      expect(Number.isInteger(body.pid)).toBe(true);
      const listed = (await json('GET', '/commands')).body.processes.find((p: any) => p.pid === body.pid);
      expect(listed).toMatchObject({ running: true });
      expectError(await json('POST', '/commands', { cmd: 'true', background: 'yes' }), 400, /background/);
      await json('DELETE', `/commands/${body.pid}`);
    },
  },
  {
    line: 161,
    says: 'cwd | string | Working directory; defaults to the daemon default (typically the user\'s home)',
    check: async () => {
      expect((await sh('pwd')).body.stdout).toBe(`${user.home}\n`);
      expect((await sh('pwd', { cwd: dir })).body.stdout).toBe(`${dir}\n`);
      expectError(await sh('pwd', { cwd: join(dir, 'missing') }), 400, /cwd/);
    },
  },
  {
    line: 162,
    says: 'envs | object | Extra variables for this command, merged with the sandbox\'s envs',
    check: async () => {
      expect((await json('POST', '/init', { envs: { FROM_SANDBOX: 'sandbox', BOTH: 'sandbox' } })).status).toBe(204);
      try {
        const { body } = await sh('echo "$FROM_SANDBOX $BOTH $FROM_COMMAND"', { envs: { BOTH: 'command', FROM_COMMAND: 'command' } });
        expect(body.stdout).toBe('sandbox command command\n');
        // For this command only.
        expect((await sh('echo "[$FROM_COMMAND]"')).body.stdout).toBe('[]\n');
      } finally {
        await json('POST', '/init', { envs: {} });
      }
    },
  },
  {
    line: 163,
    says: 'timeout | number | Seconds per command; 0 means no timeout',
    check: async () => {
      const timedOut = (await sh('sleep 30', { timeout: 0.5 })).body;
      expect(timedOut).toMatchObject({ exit_code: 124, timed_out: true });
      expect((await sh('sleep 0.6; echo survived', { timeout: 0 })).body).toMatchObject({ stdout: 'survived\n', exit_code: 0 });
      expectError(await sh('true', { timeout: 'soon' }), 400, /timeout/);
    },
  },
  {
    line: 164,
    says: 'user | string | Unix user; defaults to the daemon default',
    check: async () => {
      expect((await sh('id -un')).body.stdout).toBe(`${user.name}\n`);
      expect((await sh('id -un', { user: user.name })).body.stdout).toBe(`${user.name}\n`);
      expectError(await sh('id -un', { user: 'no-such-user-envd' }), 400, /user/);
    },
  },
  {
    line: 165,
    says: 'stdin | boolean | Default false; reserves a stdin pipe, meaningful only with background true',
    check: async () => {
      // Default false: stdin is empty (/dev/null), so `cat` ends at once.
      expect((await sh('cat; echo eof')).body.stdout).toBe('eof\n');
      const pid = await background('cat', { stdin: true });
      expect(await json('POST', `/commands/${pid}/stdin`, { data: 'typed\n' })).toEqual({ status: 200, body: {} });
      expect(await json('DELETE', `/commands/${pid}/stdin`)).toEqual({ status: 200, body: {} });
      expect((await json('GET', `/commands/${pid}/wait`)).body).toMatchObject({ stdout: 'typed\n', exit_code: 0 });
    },
  },
  {
    line: 167,
    says: 'Returns CommandResult when background is false; BackgroundProcess when true',
    check: async () => {
      expect(Object.keys((await sh('true')).body)).toEqual(expect.arrayContaining(['stdout', 'stderr', 'exit_code']));
      const { body } = await sh('true', { background: true });
      expect(body).toEqual({ pid: expect.any(Number) });
      await json('GET', `/commands/${body.pid}/wait`);
    },
  },
  // §4 POST /commands/stream, §6 Events
  {
    line: 170,
    says: 'stream Body: `cmd` (string, required), `cwd`, `envs` (object), `timeout` (number, seconds), `user`',
    check: async () => {
      // A bad body is a JSON error, not a stream.
      expectError(await json('POST', '/commands/stream', {}), 400, /cmd/);
      const response = await envd.call('POST', '/commands/stream', { cmd: 'echo "$(pwd) $X $(id -un)"', cwd: dir, envs: { X: 'x' }, timeout: 30, user: user.name });
      const events = await collectEvents(response);
      expect(events.find((e) => e.event === 'stdout')!.data.data).toBe(`${dir} x ${user.name}\n`);
      const timed = await collectEvents(await envd.call('POST', '/commands/stream', { cmd: 'sleep 30', timeout: 0.3 }));
      expect(timed.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 124 } });
    },
  },
  {
    line: 171,
    says: 'Returns `text/event-stream` (see Events). The stream ends when the command exits',
    check: async () => {
      const response = await envd.call('POST', '/commands/stream', { cmd: 'echo a; sleep 0.2; echo b' });
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const events = await collectEvents(response);
      // collectEvents returns only when the response body has ended; the exit event is the last.
      expect(events.at(-1)!.event).toBe('exit');
    },
  },
  {
    line: 219,
    says: 'each event has an `event:` line and a JSON `data:` line',
    check: async () => {
      const text = await (await envd.call('POST', '/commands/stream', { cmd: 'printf "x\\ny"; echo e >&2' })).text();
      for (const block of text.split('\n\n').filter((b) => b.trim() !== '' && !b.startsWith(':'))) {
        const lines = block.split('\n');
        expect(lines.filter((l) => l.startsWith('event: '))).toHaveLength(1);
        const data = lines.filter((l) => l.startsWith('data: '));
        expect(data).toHaveLength(1);
        expect(() => JSON.parse(data[0]!.slice(6))).not.toThrow();
      }
    },
  },
  {
    line: 223,
    says: 'POST commands/stream | `stdout` | `{ stream: \'stdout\', data: string }`',
    check: async () => {
      const events = await collectEvents(await envd.call('POST', '/commands/stream', { cmd: 'echo hello' }));
      expect(events.filter((e) => e.event === 'stdout').map((e) => e.data)).toEqual([{ stream: 'stdout', data: 'hello\n' }]);
    },
  },
  {
    line: 224,
    says: 'POST commands/stream | `exit` | `{ exit_code: integer }`, ends the stream',
    check: async () => {
      const events = await collectEvents(await envd.call('POST', '/commands/stream', { cmd: 'exit 7' }));
      expect(events.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 7 } });
      expect(events.filter((e) => e.event === 'exit')).toHaveLength(1);
    },
  },
  {
    line: 228,
    says: 'events may carry additional fields (the named ones keep their names and types); stderr\'s event name is envd\'s: `stderr` (envd-api)',
    check: async () => {
      const events = await collectEvents(await envd.call('POST', '/commands/stream', { cmd: 'echo oops >&2' }));
      expect(events[0]).toEqual({ event: 'start', data: { pid: expect.any(Number) } });
      expect(events.find((e) => e.event === 'stderr')!.data).toEqual({ stream: 'stderr', data: 'oops\n' });
      expect(typeof events.at(-1)!.data.exit_code).toBe('number');
    },
  },
  // §4 POST /commands/{pid}/stdin
  {
    line: 174,
    says: 'stdin: Path: `pid` integer. Body: `data` string, required (include a newline to simulate Enter)',
    check: async () => {
      const pid = await background('read line; echo "got $line"', { stdin: true });
      expectError(await json('POST', '/commands/abc/stdin', { data: 'x' }), 400, /pid/);
      expectError(await json('POST', `/commands/${pid}/stdin`, {}), 400, /data/);
      await json('POST', `/commands/${pid}/stdin`, { data: 'enter\n' });
      expect((await json('GET', `/commands/${pid}/wait`)).body.stdout).toBe('got enter\n');
    },
  },
  {
    line: 175,
    says: 'The target must have been started with `stdin: true`. Returns `{}`',
    check: async () => {
      const pid = await background('sleep 30');
      // envd-api: 409 if the process was not started with stdin: true; 404 if not tracked.
      expectError(await json('POST', `/commands/${pid}/stdin`, { data: 'x' }), 409, /stdin/);
      expectError(await json('POST', '/commands/4194303/stdin', { data: 'x' }), 404);
      await json('DELETE', `/commands/${pid}`);
    },
  },
  // §4 GET /commands/{pid}/wait
  {
    line: 178,
    says: 'wait: Blocks until the background process finishes; returns CommandResult',
    check: async () => {
      const pid = await background('sleep 0.3; echo late; echo lerr >&2; exit 4');
      expect(await json('GET', `/commands/${pid}/wait`)).toEqual({ status: 200, body: expect.objectContaining({ stdout: 'late\n', stderr: 'lerr\n', exit_code: 4 }) });
    },
  },
  {
    line: 178,
    says: 'The process is then removed from the tracked list',
    check: async () => {
      const pid = await background('echo once');
      expect((await json('GET', `/commands/${pid}/wait`)).body.stdout).toBe('once\n');
      expect((await json('GET', '/commands?finished=true')).body.processes.map((p: any) => p.pid)).not.toContain(pid);
      expect((await json('GET', `/commands/${pid}/wait`)).body).toMatchObject(NOT_FOUND_RESULT);
      expect((await json('DELETE', `/commands/${pid}`)).body).toEqual({ killed: false });
      expect((await envd.call('GET', `/commands/${pid}/stream`)).status).toBe(404);
    },
  },
  {
    line: 179,
    says: 'If the pid is not tracked: CommandResult with `exit_code` 1 and stderr containing `process not found`',
    check: async () => {
      const { status, body } = await json('GET', '/commands/4194303/wait');
      expect(status).toBe(200);
      expect(body).toMatchObject({ exit_code: 1, stdout: '' });
      expect(body.stderr).toContain('process not found');
    },
  },
  {
    line: 268,
    says: 'wait | 400, … — "invalid parameter (for example pid not an integer)" (§7)',
    check: async () => {
      for (const pid of ['abc', '1.5', '-1']) expectError(await json('GET', `/commands/${pid}/wait`), 400, /pid/);
    },
  },
  // §4 DELETE /commands/{pid}
  {
    line: 182,
    says: 'DELETE: Removes the background process from the tracking list. Returns `{ killed: boolean }`: true if it was found and removed, false if not tracked',
    check: async () => {
      const suffix = `${process.pid}-${Date.now()}`;
      const marker = `envd-spec-kill-${suffix}`;
      // Assembled inside the sleeper only (its argv[0]), so that no shell's command line matches.
      const pid = await background(`export P=envd-spec-kill- S=${suffix}; bash -c 'exec -a "$P$S" sleep 300'`);
      await waitFor(() => findProcesses(marker).length > 0, 10_000, 'the command to start');
      expect(await json('DELETE', `/commands/${pid}`)).toEqual({ status: 200, body: { killed: true } });
      // "Actual process termination is done by the in-VM daemon": envd ends it.
      await waitFor(() => findProcesses(marker).length === 0, 10_000, 'the command to be killed');
      expect((await json('GET', '/commands?finished=true')).body.processes.map((p: any) => p.pid)).not.toContain(pid);
      expect(await json('DELETE', `/commands/${pid}`)).toEqual({ status: 200, body: { killed: false } });
      expect((await json('GET', `/commands/${pid}/wait`)).body).toMatchObject(NOT_FOUND_RESULT);
    },
  },
  {
    line: 269,
    says: 'kill command | 400, 401 — a pid that is not an integer is 400',
    check: async () => {
      expectError(await json('DELETE', '/commands/1e99'), 400, /pid/);
      expectError(await json('DELETE', '/commands/abc'), 400, /pid/);
    },
  },
  // §7 and §8, as they apply to commands
  {
    line: 234,
    says: 'Errors: body shape `{ message: string }`; 401 for a missing or invalid key (envd: its bearer token)',
    check: async () => {
      const bad = await envd.call('GET', '/commands', undefined, { headers: { authorization: 'Bearer wrong' } });
      expect(bad.status).toBe(401);
      expect(await bad.json()).toEqual({ message: expect.any(String) });
      expectError(await json('GET', '/no-such-route'), 404);
    },
  },
  {
    line: 286,
    says: 'JSON request body | 10 MiB, larger gives 413 | all JSON endpoints',
    check: async () => {
      const response = await fetch(`${envd.url}/commands`, {
        method: 'POST',
        headers: { authorization: `Bearer ${envd.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ cmd: `true # ${'a'.repeat(10 * 1024 * 1024)}` }),
      });
      expect(response.status).toBe(413);
      expect(await response.json()).toEqual({ message: expect.any(String) });
    },
  },
];

const filesystemGroup: Row[] = [
  // §4 PUT /files/raw
  {
    line: 187,
    says: 'raw: Query: `path` string, required, absolute; parent directories are created',
    check: async () => {
      const put = (query: string) => envd.call('PUT', `/files/raw${query}`, undefined, { body: 'bytes', headers: { 'content-type': 'application/octet-stream' } });
      expectError({ status: (await put('')).status, body: await (await put('')).json() }, 400, /path/);
      const relative = await put('?path=relative.txt');
      expectError({ status: relative.status, body: await relative.json() }, 400, /path/);
      const target = join(fresh('raw'), 'a/b/file.bin');
      expect((await put(`?${q(target)}`)).status).toBe(200);
      expect(readFileSync(target, 'utf8')).toBe('bytes');
    },
  },
  {
    line: 187,
    says: '`username` string, optional, owner of the file (defaults to the daemon default user)',
    check: async () => {
      const upload = (path: string, username?: string) =>
        envd.call('PUT', `/files/raw?${q(path)}${username ? `&username=${username}` : ''}`, undefined, { body: 'x', headers: { 'content-type': 'application/octet-stream' } });
      const unknown = await upload(fresh('x'), 'no-such-user-envd');
      expectError({ status: unknown.status, body: await unknown.json() }, 400, /username/);
      const byDefault = fresh('owned-default');
      expect((await upload(byDefault)).status).toBe(200);
      // Only root can give files away (envd-api); a non-root envd's files are its own.
      expect(statSync(byDefault).uid).toBe(process.getuid?.() === 0 ? user.uid : process.getuid?.());
      const byRoot = fresh('owned-root');
      expect((await upload(byRoot, 'root')).status).toBe(process.getuid?.() === 0 ? 200 : 400);
      if (process.getuid?.() === 0) expect(statSync(byRoot).uid).toBe(0);
    },
  },
  {
    line: 188,
    says: 'Header: `Content-Type` must be `application/octet-stream`',
    check: async () => {
      const target = fresh('typed');
      const response = await envd.call('PUT', `/files/raw?${q(target)}`, undefined, { body: 'x', headers: { 'content-type': 'text/plain' } });
      expectError({ status: response.status, body: await response.json() }, 400);
      expect(() => lstatSync(target)).toThrow();
    },
  },
  {
    line: 189,
    says: 'Body: raw bytes, up to 500 MiB, streamed to disk — and §8 "Raw upload body | 500 MiB, larger gives 413"',
    check: async () => {
      const target = fresh('huge');
      const over = await putDeclaredOverLimit(envd.url, envd.token!, target);
      expect(over.status).toBe(413);
      expect(over.body).toEqual({ message: expect.any(String) });
      expect(() => lstatSync(target)).toThrow();
    },
  },
  {
    line: 190,
    says: 'Returns `{ path: string, size: integer }`',
    check: async () => {
      const target = fresh('sized');
      const response = await envd.call('PUT', `/files/raw?${q(target)}`, undefined, { body: Buffer.alloc(1234, 1), headers: { 'content-type': 'application/octet-stream' } });
      expect(await response.json()).toMatchObject({ path: target, size: 1234 });
    },
  },
  // §4 POST /files/batch
  {
    line: 193,
    says: 'batch Body: `files` array, required, of `{ path: string (absolute, required), data: string (content, required) }`',
    check: async () => {
      expectError(await json('POST', '/files/batch', {}), 400, /files/);
      expectError(await json('POST', '/files/batch', { files: [{ data: 'x' }] }), 400, /path/);
      expectError(await json('POST', '/files/batch', { files: [{ path: fresh('no-data') }] }), 400, /data/);
      expectError(await json('POST', '/files/batch', { files: [{ path: 'relative', data: 'x' }] }), 400, /path/);
    },
  },
  {
    line: 193,
    says: 'Parent directories are created per entry; the files are written atomically',
    check: async () => {
      const base = fresh('batch');
      const files = [{ path: join(base, 'one/a.txt'), data: 'A' }, { path: join(base, 'two/deeper/b.txt'), data: 'B' }];
      expect((await json('POST', '/files/batch', { files })).status).toBe(200);
      expect(files.map((f) => readFileSync(f.path, 'utf8'))).toEqual(['A', 'B']);
      // Atomically, and all or nothing (envd-api): one entry that cannot be written changes no target.
      mkdirSync(join(base, 'a-directory'));
      writeFileSync(join(base, 'one/a.txt'), 'old');
      expectError(await json('POST', '/files/batch', { files: [{ path: join(base, 'one/a.txt'), data: 'new' }, { path: join(base, 'a-directory'), data: 'x' }] }), 400);
      expect(readFileSync(join(base, 'one/a.txt'), 'utf8')).toBe('old');
    },
  },
  {
    line: 194,
    says: 'Response: the daemon\'s batch write confirmation as a JSON object (envd-api: `{ files: [{ path, size }] }`)',
    check: async () => {
      const path = fresh('confirmed');
      const { status, body } = await json('POST', '/files/batch', { files: [{ path, data: 'four' }] });
      expect(status).toBe(200);
      expect(body).toMatchObject({ files: [{ path, size: 4 }] });
      expect(await json('POST', '/files/batch', { files: [] })).toMatchObject({ status: 200, body: { files: [] } });
    },
  },
  {
    line: 271,
    says: 'files/batch | 400, … — an entry inside another entry is a bad request, with nothing written',
    check: async () => {
      const base = fresh('nested');
      expectError(await json('POST', '/files/batch', { files: [{ path: join(base, 'a'), data: '1' }, { path: join(base, 'a/b'), data: '2' }] }), 400);
      expect(() => lstatSync(base)).toThrow();
    },
  },
  // §4 GET /files/exists
  {
    line: 197,
    says: 'exists: Query: `path` string, required. Returns `{ exists: boolean }`; true for any entry type',
    check: async () => {
      expectError(await json('GET', '/files/exists'), 400, /path/);
      const base = fresh('kinds');
      mkdirSync(base);
      writeFileSync(join(base, 'file'), '');
      symlinkSync('nowhere', join(base, 'dangling'));
      execFileSync('mkfifo', [join(base, 'fifo')]);
      for (const path of [base, join(base, 'file'), join(base, 'dangling'), join(base, 'fifo')]) {
        expect(await json('GET', `/files/exists?${q(path)}`), path).toEqual({ status: 200, body: { exists: true } });
      }
      expect(await json('GET', `/files/exists?${q(join(base, 'missing'))}`)).toEqual({ status: 200, body: { exists: false } });
    },
  },
  // §2 File entry info; §4 GET /files/info
  {
    line: 200,
    says: 'info: Query: `path` string, required. Returns the file entry info; status 404 if the path does not exist',
    check: async () => {
      expectError(await json('GET', '/files/info'), 400, /path/);
      expectError(await json('GET', `/files/info?${q(fresh('missing'))}`), 404);
    },
  },
  {
    line: 80,
    says: 'File entry info: name "Base name, not the full path"; path "Absolute path inside the sandbox"; type `file`, `dir` or `symlink`; size "Size in bytes; 0 for directories"',
    check: async () => {
      const base = fresh('info');
      mkdirSync(base);
      writeFileSync(join(base, 'data.txt'), 'twelve bytes');
      symlinkSync('data.txt', join(base, 'link'));
      expect((await json('GET', `/files/info?${q(join(base, 'data.txt'))}`)).body).toMatchObject({ name: 'data.txt', path: join(base, 'data.txt'), type: 'file', size: 12 });
      expect((await json('GET', `/files/info?${q(base)}`)).body).toMatchObject({ name: base.split('/').pop(), path: base, type: 'dir', size: 0 });
      // A symlink is described, not followed (envd-api).
      expect((await json('GET', `/files/info?${q(join(base, 'link'))}`)).body).toMatchObject({ name: 'link', type: 'symlink' });
    },
  },
  // §4 POST /files/watch; §6 Events
  {
    line: 203,
    says: 'watch Body: `path` string, required, absolute directory path — and §7 "watch | 401, 404, 503"',
    check: async () => {
      expectError(await json('POST', '/files/watch', {}), 400, /path/);
      expectError(await json('POST', '/files/watch', { path: 'relative' }), 400, /path/);
      expectError(await json('POST', '/files/watch', { path: fresh('missing') }), 404);
      const file = fresh('not-a-dir');
      writeFileSync(file, '');
      expectError(await json('POST', '/files/watch', { path: file }), 400);
    },
  },
  {
    line: 225,
    says: 'POST files/watch (intended) | `change` | `{ type: \'create\' or \'modify\' or \'delete\', path: string }` — envd serves the intended stream (§4 line 204, §9), not `{}`',
    check: async () => {
      const base = fresh('watched');
      mkdirSync(base);
      const controller = new AbortController();
      const response = await envd.call('POST', '/files/watch', { path: base }, { signal: controller.signal });
      expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const events = readEvents(response);
      expect((await events.next()).value).toEqual({ event: 'ready', data: { path: base } });
      const target = join(base, 'new.txt');
      writeFileSync(target, 'x');
      const seen: any[] = [];
      try {
        for await (const event of events) {
          if (event.event !== 'change') continue;
          seen.push(event.data);
          if (event.data.type === 'create' && event.data.path === target) break;
        }
      } finally {
        controller.abort();
      }
      for (const change of seen) expect(change).toEqual({ type: expect.stringMatching(/^(create|modify|delete)$/), path: expect.stringMatching(/^\//) });
    },
  },
];

describe.each([
  ['§4 Command group (with §2 CommandResult/BackgroundProcess, §6 Events, §7 Errors, §8 Limits)', commandGroup],
  ['§4 Filesystem group (with §2 File entry info, §7 Errors, §8 Limits)', filesystemGroup],
])('%s', (_, rows) => {
  it.each(rows.map((row) => [row.line === 'envd-api' ? 'envd-api' : `spec:${row.line}`, row.says, row] as const))('%s %s', async (_line, _says, row) => {
    await row.check();
  });
});

describe('§8 Limits (the JSON body limit, on a filesystem route)', () => {
  it('spec:286 JSON request body | 10 MiB, larger gives 413 (POST /files)', async () => {
    const over = await postJsonOverLimit(envd.url, envd.token!, fresh('json-over'));
    expect(over.status).toBe(413);
    expect(over.body).toEqual({ message: expect.any(String) });
  });
});
