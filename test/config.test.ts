import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, DEFAULT_MAX_OUTPUT_BYTES, defaultDirs, MIN_CLIENT_MEMORY_BYTES, parseCli } from '../src/config.js';
import { RESERVE_BYTES, splitOf } from '../src/memory-budget.js';

// One scratch directory for the whole file, removed at the end.
const scratch = mkdtempSync(join(tmpdir(), 'envd-config-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const run = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
  const action = parseCli(argv, env);
  if (action.kind !== 'run') throw new Error(action.kind);
  return action.config;
};

const problems = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
  try {
    parseCli(argv, env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  throw new Error('expected a ConfigError');
};

describe('parseCli', () => {
  it('has the contract defaults', () => {
    expect(run([])).toEqual({
      host: '0.0.0.0', port: 49983, accessToken: undefined, accessTokenFile: undefined, defaultUser: undefined,
      defaultWorkdir: undefined, maxOutputBytes: DEFAULT_MAX_OUTPUT_BYTES, logLevel: 'info', directOutput: true,
      outputMemoryBytes: 33554432, clientMemoryBytes: 52 * 1024 * 1024, maxSpoolBytes: 1073741824, keepFinishedMs: 600_000, keepCollectedMs: 0, sessionIdleTimeoutMs: 0, ...defaultDirs(process.getuid!(), {}),
      entrypointFile: undefined, servicesDir: '/etc/envd/services', reserveMemoryBytes: 128 * 1024 * 1024, commandCgroups: 'auto',
      forwardLoopback: true, forwardAddresses: undefined, forwardSteering: true,
    });
    expect(DEFAULT_MAX_OUTPUT_BYTES).toBe(67108864);
  });

  it('takes --reserve-memory in bytes and an absolute --entrypoint-file, naming the option when wrong', () => {
    expect(run(['--reserve-memory', '0']).reserveMemoryBytes).toBe(0);
    expect(run([], { ENVD_RESERVE_MEMORY: '268435456' }).reserveMemoryBytes).toBe(268435456);
    expect(() => run(['--reserve-memory', '1G'])).toThrow(/--reserve-memory \(ENVD_RESERVE_MEMORY\) must be a number of bytes/);
    expect(run(['--entrypoint-file', '/etc/envd/entrypoint.json']).entrypointFile).toBe('/etc/envd/entrypoint.json');
    expect(() => run(['--entrypoint-file', 'entrypoint.json'])).toThrow(/--entrypoint-file \(ENVD_ENTRYPOINT_FILE\) must be an absolute path/);
  });

  it('takes --forward-loopback on or off, and --forward-address repeated (or ENVD_FORWARD_ADDRESS comma-separated) as IP addresses', () => {
    expect(run(['--forward-loopback', 'off']).forwardLoopback).toBe(false);
    expect(run([], { ENVD_FORWARD_LOOPBACK: 'off' }).forwardLoopback).toBe(false);
    expect(() => run(['--forward-loopback', 'no'])).toThrow(/--forward-loopback \(ENVD_FORWARD_LOOPBACK\) must be on or off, got "no"/);
    expect(run(['--forward-address', '127.0.0.2', '--forward-address', 'fd00::2']).forwardAddresses).toEqual(['127.0.0.2', 'fd00::2']);
    expect(run([], { ENVD_FORWARD_ADDRESS: '10.0.0.2, 127.0.0.2' }).forwardAddresses).toEqual(['10.0.0.2', '127.0.0.2']);
    // The flag wins over the variable, as every option's does.
    expect(run(['--forward-address', '127.0.0.3'], { ENVD_FORWARD_ADDRESS: '10.0.0.2' }).forwardAddresses).toEqual(['127.0.0.3']);
    expect(() => run(['--forward-address', 'eth0'])).toThrow(/--forward-address \(ENVD_FORWARD_ADDRESS\) must be an IPv4 or IPv6 address of the guest \(not a wildcard\), got "eth0"/);
    expect(() => run([], { ENVD_FORWARD_ADDRESS: '0.0.0.0' })).toThrow(/not a wildcard\), got "0.0.0.0"/);
  });

  it('takes --forward-steering on or off (ENVD_FORWARD_STEERING), naming it when wrong', () => {
    expect(run(['--forward-steering', 'off']).forwardSteering).toBe(false);
    expect(run([], { ENVD_FORWARD_STEERING: 'off' }).forwardSteering).toBe(false);
    expect(run([], { ENVD_FORWARD_STEERING: 'on' }).forwardSteering).toBe(true);
    expect(() => run(['--forward-steering', 'bpf'])).toThrow(/--forward-steering \(ENVD_FORWARD_STEERING\) must be on or off, got "bpf"/);
  });

  it('takes --command-cgroups auto or off, and refuses anything else naming it', () => {
    expect(run(['--command-cgroups', 'off']).commandCgroups).toBe('off');
    expect(run([], { ENVD_COMMAND_CGROUPS: 'off' }).commandCgroups).toBe('off');
    expect(() => run(['--command-cgroups', 'no'])).toThrow(/--command-cgroups \(ENVD_COMMAND_CGROUPS\) must be auto or off, got "no"/);
  });

  it('takes --keep-finished in seconds, 0 to a week, and refuses anything else naming it', () => {
    expect(run(['--keep-finished', '0']).keepFinishedMs).toBe(0);
    expect(run(['--keep-finished', '604800']).keepFinishedMs).toBe(604_800_000);
    expect(run([], { ENVD_KEEP_FINISHED: '30' }).keepFinishedMs).toBe(30_000);
    for (const bad of ['604801', '1.5', '10m', ' 5']) {
      expect(() => run(['--keep-finished', bad])).toThrow(/--keep-finished \(ENVD_KEEP_FINISHED\) must be a number of seconds from 0 to 604800/);
    }
  });

  it('takes --session-idle-timeout in seconds, 0 (the default: never) to a week, and refuses anything else naming it', () => {
    expect(run(['--session-idle-timeout', '604800']).sessionIdleTimeoutMs).toBe(604_800_000);
    expect(run([], { ENVD_SESSION_IDLE_TIMEOUT: '90' }).sessionIdleTimeoutMs).toBe(90_000);
    for (const bad of ['-1', '604801', '1.5', 'soon']) {
      expect(() => run([`--session-idle-timeout=${bad}`])).toThrow(/--session-idle-timeout \(ENVD_SESSION_IDLE_TIMEOUT\) must be a number of seconds from 0 to 604800/);
    }
  });

  it('takes --keep-collected in seconds, 0 (the default: forgotten once collected) to a week, and refuses anything else naming it', () => {
    expect(run([]).keepCollectedMs).toBe(0);
    expect(run(['--keep-collected', '60']).keepCollectedMs).toBe(60_000);
    expect(run([], { ENVD_KEEP_COLLECTED: '30' }).keepCollectedMs).toBe(30_000);
    for (const bad of ['604801', '1.5', '10s', 'x']) {
      expect(() => run(['--keep-collected', bad])).toThrow(/--keep-collected \(ENVD_KEEP_COLLECTED\) must be a number of seconds from 0 to 604800/);
    }
  });

  it('keeps state in /run/envd and spools to /var/lib/envd/spool as root, and per user otherwise', () => {
    expect(defaultDirs(0, {})).toEqual({ stateDir: '/run/envd', spoolDir: '/var/lib/envd/spool' });
    expect(defaultDirs(1000, { XDG_RUNTIME_DIR: '/run/user/1000', XDG_CACHE_HOME: '/home/a/.cache' })).toEqual({
      stateDir: '/run/user/1000/envd',
      spoolDir: '/home/a/.cache/envd/spool',
    });
  });

  it('takes --client-memory-bytes (the budget for clients) from half its default up, naming the option when lower', () => {
    expect(run(['--client-memory-bytes', String(MIN_CLIENT_MEMORY_BYTES)]).clientMemoryBytes).toBe(MIN_CLIENT_MEMORY_BYTES);
    expect(run([], { ENVD_CLIENT_MEMORY_BYTES: '1073741824' }).clientMemoryBytes).toBe(1073741824);
    expect(problems(['--client-memory-bytes', String(MIN_CLIENT_MEMORY_BYTES - 1)]).join('\n')).toMatch(new RegExp(`--client-memory-bytes.*at least ${MIN_CLIENT_MEMORY_BYTES}`));
    // Scaled, every part still holds the largest piece of work it takes.
    const smallest = splitOf(MIN_CLIENT_MEMORY_BYTES);
    expect(smallest.archives).toBeGreaterThanOrEqual(RESERVE_BYTES.archiveUpload);
    expect(smallest.transfers).toBeGreaterThanOrEqual(RESERVE_BYTES.download);
  });

  it('reads the output budgets and the directories, and refuses bad ones', () => {
    const env = { ENVD_OUTPUT_MEMORY_BYTES: '1024', ENVD_MAX_SPOOL_BYTES: '0', ENVD_SPOOL_DIR: '/srv/spool', ENVD_STATE_DIR: '/srv/state' };
    expect(run([], env)).toMatchObject({ outputMemoryBytes: 1024, maxSpoolBytes: 0, spoolDir: '/srv/spool', stateDir: '/srv/state' });
    const found = problems(['--output-memory-bytes=-5', '--max-spool-bytes', '1.5', '--spool-dir', 'rel', '--state-dir', 'rel']);
    expect(found).toHaveLength(4);
    expect(found.join('\n')).toMatch(/--output-memory-bytes.*-5/);
    expect(found.join('\n')).toMatch(/--max-spool-bytes.*1\.5/);
    expect(found.join('\n')).toMatch(/--spool-dir.*absolute/);
    expect(found.join('\n')).toMatch(/--state-dir.*absolute/);
  });

  it('reads every option from its environment variable, and flags win over it', () => {
    const env = { ENVD_HOST: '127.0.0.2', ENVD_PORT: '1234', ENVD_DEFAULT_USER: 'alice', ENVD_DEFAULT_WORKDIR: '/srv', ENVD_MAX_OUTPUT_BYTES: '99', ENVD_LOG_LEVEL: 'debug', ENVD_ACCESS_TOKEN: 'tok' };
    expect(run([], env)).toMatchObject({ host: '127.0.0.2', port: 1234, defaultUser: 'alice', defaultWorkdir: '/srv', maxOutputBytes: 99, logLevel: 'debug', accessToken: 'tok' });
    expect(run(['--port', '5678', '--log-level=warn'], env)).toMatchObject({ port: 5678, logLevel: 'warn' });
  });

  it('reads the token from a file, trimmed, ahead of the environment variable', () => {
    const file = join(scratch, 'token');
    writeFileSync(file, 's3cret\n');
    expect(run(['--access-token-file', file], { ENVD_ACCESS_TOKEN: 'other' }).accessToken).toBe('s3cret');
  });

  it('turns direct output off, and takes only on or off', () => {
    expect(run(['--direct-output', 'off']).directOutput).toBe(false);
    expect(run([], { ENVD_DIRECT_OUTPUT: 'off' }).directOutput).toBe(false);
    expect(problems(['--direct-output', 'no']).join('\n')).toMatch(/--direct-output.*on or off.*"no"/);
  });

  it('names every bad option at once', () => {
    const found = problems(['--port', '70000', '--max-output-bytes=-1', '--log-level', 'loud', '--default-workdir', 'rel']);
    expect(found).toHaveLength(4);
    expect(found.join('\n')).toMatch(/--port.*70000/);
    expect(found.join('\n')).toMatch(/--max-output-bytes/);
    expect(found.join('\n')).toMatch(/--log-level.*loud/);
    expect(found.join('\n')).toMatch(/--default-workdir.*absolute/);
  });

  it('starts uninitialised when the token file does not exist yet, remembering where /init will write it', () => {
    expect(run(['--access-token-file', '/nonexistent/token'])).toMatchObject({ accessToken: undefined, accessTokenFile: '/nonexistent/token' });
  });

  it('rejects an unreadable or relative token file and unknown flags', () => {
    expect(problems(['--access-token-file', scratch])[0]).toMatch(/--access-token-file.*EISDIR/);
    expect(problems(['--access-token-file', 'relative/token']).join('\n')).toMatch(/--access-token-file.*absolute/);
    expect(problems(['--bogus'])[0]).toMatch(/bogus/);
    expect(problems(['--port', 'abc'])[0]).toMatch(/--port/);
  });

  it('answers --help and --version', () => {
    expect(parseCli(['--help'], {})).toEqual({ kind: 'help' });
    expect(parseCli(['--version'], {})).toEqual({ kind: 'version' });
  });
});
