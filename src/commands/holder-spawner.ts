import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import { HttpError } from '../errors.js';
import type { Logger } from '../logger.js';
import { signalGroup, signalProcess } from './kill-tree.js';

/** What a spawn request comes back with: the holder's pid and the first line it printed (empty if none). */
export interface SpawnedHolder {
  holderPid: number;
  line: string;
}

/** errno numbers back to their names (EMFILE, EAGAIN, ...), for the spawner's `spawn-errno` replies. */
const ERRNO_NAMES = new Map(Object.entries(constants.errno).map(([name, number]) => [number, name]));

/**
 * envd's end of `envd-holder --spawner` (src/holder/spawner.c): one small
 * process that forks every command's holder, so envd's own large process never
 * forks per command (Node's spawn blocked the event loop 5-9 ms each time).
 * Started on first use and again after it dies; it exits when envd does (EOF).
 */
export class HolderSpawner {
  private child: ChildProcess | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (holder: SpawnedHolder) => void; reject: (error: Error) => void }>();

  constructor(
    private readonly holderPath: string,
    private readonly log: Logger,
  ) {}

  /**
   * Starts the holder `argv` (argv[0] its absolute path) in `cwd` with `env`, in its own session,
   * and resolves once it printed its first line or ended without one. Past
   * `timeoutMs` it rejects, and a holder that answers after all is killed.
   */
  spawn(argv: string[], cwd: string, env: Record<string, string>, timeoutMs: number): Promise<SpawnedHolder> {
    const child = this.child ?? this.start();
    const id = this.nextId++;
    const strings = [cwd, ...argv, ...Object.entries(env).map(([name, value]) => `${name}=${value}`)];
    const body = Buffer.from(`${strings.join('\0')}\0`);
    const header = Buffer.alloc(16);
    header.writeUInt32LE(12 + body.length, 0);
    header.writeUInt32LE(id, 4);
    header.writeUInt32LE(argv.length, 8);
    header.writeUInt32LE(strings.length - 1 - argv.length, 12);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        // Too late for this request: a holder that still comes up would run a command nobody tracks.
        this.pending.set(id, { resolve: killLate, reject: () => {} });
        reject(new Error(`envd-holder did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      const settle = () => clearTimeout(timer);
      this.pending.set(id, {
        resolve: (holder) => (settle(), resolve(holder)),
        reject: (error) => (settle(), reject(error)),
      });
      // A spawner that could not start (EMFILE) has no stdin: its 'error' fails this request.
      if (child.stdin?.writable) child.stdin.write(Buffer.concat([header, body]));
    });
  }

  /** The running spawner's pid, if one runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Lets the spawner go (it exits at EOF); holders it started run on. */
  close(): void {
    this.child?.stdin?.end();
    this.child = undefined;
  }

  private start(): ChildProcess {
    // No environment: each holder gets its command's from the request (and shows the spawner's, none, in /proc).
    const child = spawn(this.holderPath, ['--spawner'], { env: {}, stdio: ['pipe', 'pipe', 'ignore'] });
    this.child = child;
    // A spawner that died (killed, OOM) fails what it had not answered; the next command starts another.
    const lost = (why: string) => {
      if (this.child === child) this.child = undefined;
      const error = new HttpError(503, `the command could not be started: envd's holder spawner ${why}; retry`);
      for (const { reject } of this.pending.values()) reject(error);
      this.pending.clear();
    };
    child.on('error', (error) => {
      this.log.warn({ err: error }, 'holder spawner error');
      lost('failed');
    });
    child.on('exit', (code, signal) => {
      if (this.pending.size > 0 || this.child === child) this.log.warn({ code, signal }, 'holder spawner exited');
      lost('exited');
    });
    child.stdin?.on('error', () => {}); // EPIPE once it is gone: 'exit' reports it
    let buffered = '';
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (text: string) => {
      buffered += text;
      for (let end = buffered.indexOf('\n'); end >= 0; end = buffered.indexOf('\n')) {
        this.onReply(buffered.slice(0, end));
        buffered = buffered.slice(end + 1);
      }
    });
    child.unref();
    (child.stdin as unknown as { unref?: () => void }).unref?.();
    (child.stdout as unknown as { unref?: () => void }).unref?.();
    return child;
  }

  /** "<id> <holderPid> <line>" per request; "<id> 0 spawn-errno <n>" when pipe2 or fork failed. */
  private onReply(reply: string): void {
    const [, id, pid, line = ''] = /^(\d+) (\d+) ?(.*)$/.exec(reply) ?? [];
    const waiter = this.pending.get(Number(id));
    if (!waiter) return;
    this.pending.delete(Number(id));
    const failed = pid === '0' ? /^spawn-errno (\d+)$/.exec(line) : null;
    if (failed) waiter.reject(spawnError(Number(failed[1])));
    else waiter.resolve({ holderPid: Number(pid), line });
  }
}

/** A holder that came up after its request gave up: it and its command's group go. */
function killLate(late: SpawnedHolder): void {
  const shellPid = Number(/^ready (\d+)/.exec(late.line)?.[1]);
  if (shellPid > 0) signalGroup(shellPid, 'SIGKILL');
  signalProcess(late.holderPid, 'SIGKILL');
}

/** An errno from the spawner's fork or pipe2, as the Node error a spawn would have thrown (errnoToHttpError maps it). */
function spawnError(errno: number): NodeJS.ErrnoException {
  const code = ERRNO_NAMES.get(errno) ?? `errno ${errno}`;
  return Object.assign(new Error(`spawn ${code}`), { code, errno: -errno, syscall: 'spawn' });
}
