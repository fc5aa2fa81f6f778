import { randomUUID } from 'node:crypto';
import { chmod, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { accessSync, constants } from 'node:fs';
import { badRequest, HttpError, notFound } from '../errors.js';
import type { Logger } from '../logger.js';
import type { ProcessRegistry } from '../commands/registry.js';
import { prepareCommand, SHELLS, type CommandRequest } from '../commands/spawn.js';
import type { SandboxState } from '../sandbox-state.js';
import { resolveUser } from '../users.js';
import { DRIVER } from './driver.js';
import { Session } from './session.js';
import { hangUp, killHungUp } from './shell-group.js';

/** Ended sessions remembered (oldest forgotten first), so that a late call gets 410 rather than 404. */
export const ENDED_SESSIONS_KEPT = 1000;
/** After a session's hangup (SIGHUP), how long its jobs have before SIGKILL; `nohup` ones are spared. */
export const HANGUP_GRACE_MS = 2_000;
/** How long DELETE waits for the shell's holder to record the end after the hangup's SIGKILL. */
const END_WAIT_MS = 5_000;
const RECORD_VERSION = 1;

export interface SessionRequest {
  user?: string | undefined;
  cwd?: string | undefined;
  envs?: Record<string, string> | undefined;
  shell?: 'bash' | 'sh' | undefined;
  limits?: CommandRequest['limits'];
}

/** What a restarted envd needs to find a session again: its id and the command that is its shell. */
interface SessionRecord {
  v: number;
  id: string;
  pid: number;
  command_id: string;
  user: string;
  shell: string;
  started_at: string;
}

/** The shells a `shell` asks for, by the same paths commands use. */
const SHELL_PATHS = { bash: SHELLS.filter((path) => path.endsWith('/bash')), sh: SHELLS.filter((path) => path.endsWith('/sh')) };

/**
 * The sessions envd runs, by id. Each is a background command of the process
 * registry (the holder owns the shell), plus a record in the state directory
 * (`sessions/<id>.json`) by which a restarted envd finds it again.
 */
export class SessionRegistry {
  private readonly sessions = new Map<string, Session>();
  private readonly ended = new Set<string>();
  private readonly idleTimers = new Map<Session, NodeJS.Timeout>();

  private constructor(
    private readonly processes: ProcessRegistry,
    private readonly state: SandboxState,
    private readonly dir: string,
    private readonly idleTimeoutMs: number,
    private readonly logger: Logger,
  ) {}

  /** Opens the records and re-adopts the sessions whose shells still run (their commands were re-adopted first). */
  static async open(options: { processes: ProcessRegistry; state: SandboxState; stateDir: string; idleTimeoutMs: number; logger: Logger }): Promise<SessionRegistry> {
    const dir = join(options.stateDir, 'sessions');
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await chmod(dir, 0o700);
    const registry = new SessionRegistry(options.processes, options.state, dir, options.idleTimeoutMs, options.logger);
    await registry.adopt();
    return registry;
  }

  async create(request: SessionRequest): Promise<Session> {
    const id = randomUUID();
    const prepared = await prepareCommand({ cmd: DRIVER, user: request.user, cwd: request.cwd, envs: request.envs, stdin: true, limits: request.limits }, this.state);
    if (request.shell) {
      const file = SHELL_PATHS[request.shell].find(isExecutable);
      if (!file) throw badRequest(`body/shell: this image has no ${request.shell} (none of ${SHELL_PATHS[request.shell].join(', ')})`);
      prepared.file = file;
    }
    // The listing of GET /commands shows what the command is, not the driver's text.
    prepared.cmd = `${basename(prepared.file)} (session ${id})`;
    const proc = await this.processes.start(prepared, { background: true, timeoutMs: 0 });
    const session = new Session(proc, { id, user: prepared.user, shell: basename(prepared.file), startedAt: proc.startedAt }, this.logger);
    const record: SessionRecord = { v: RECORD_VERSION, id, pid: proc.pid, command_id: proc.id, user: prepared.user.name, shell: session.shell, started_at: proc.startedAt.toISOString() };
    try {
      await writeFile(join(this.dir, `${id}.json`), JSON.stringify(record), { mode: 0o600 });
      // Answered once the shell's profile has run and it reads commands: the first command does not pay for
      // the login, `cwd` is where the profile left it, and ending a session never cuts its profile short
      // (a pyenv init killed halfway leaves a lock that holds every later login shell of that user 60 s).
      const ready = await session.run(':', { timeoutMs: 0 }, { output: () => true });
      if (ready.session_ended) throw new HttpError(409, `the session's shell ended while its login profile ran (exit code ${ready.exit_code}): see the user's profile`);
    } catch (error) {
      await this.processes.forget(proc.pid, proc);
      await rm(join(this.dir, `${id}.json`), { force: true });
      throw error;
    }
    this.track(session);
    return session;
  }

  /** A live session; 404 for an id never seen, 410 for one that has ended. */
  get(id: string): Session {
    const session = this.sessions.get(id);
    if (session && !session.ended) return session;
    if (session || this.ended.has(id)) throw new HttpError(410, `session ${id} has ended`);
    throw notFound(`no session ${id}`);
  }

  list(): Session[] {
    return [...this.sessions.values()].filter((session) => !session.ended);
  }

  /** The client is done with a command: the idle clock starts again. */
  touched(session: Session): void {
    if (this.idleTimeoutMs === 0 || session.ended) return;
    clearTimeout(this.idleTimers.get(session));
    const timer = setTimeout(() => {
      if (session.busy) return this.touched(session);
      this.logger.info({ session: session.id }, 'session idle for --session-idle-timeout: ending it');
      void this.end(session);
    }, this.idleTimeoutMs);
    timer.unref();
    this.idleTimers.set(session, timer);
  }

  /**
   * Ends a session as a terminal's hangup does: SIGHUP to the shell and its
   * jobs, SIGKILL 2 s later to those that did not end and do not ignore
   * SIGHUP. `nohup` and `setsid` jobs live on. Resolves once the shell's end
   * is recorded.
   */
  async end(session: Session): Promise<void> {
    const pid = session.pid;
    if (session.proc.running) {
      hangUp(pid, shellReaped(session));
      const deadline = Date.now() + HANGUP_GRACE_MS;
      while (session.proc.running && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      killHungUp(pid, shellReaped(session));
      await Promise.race([session.proc.finished, new Promise((resolve) => setTimeout(resolve, END_WAIT_MS).unref())]);
      // Still not recorded: the holder itself is stuck; forgetting kills it and the whole tree.
      if (session.proc.running) session.proc.kill();
    }
    await session.proc.finished;
  }

  private track(session: Session): void {
    this.sessions.set(session.id, session);
    session.onEnded = (ended) => void this.onEnded(ended);
    this.touched(session);
  }

  private async onEnded(session: Session): Promise<void> {
    clearTimeout(this.idleTimers.get(session));
    this.idleTimers.delete(session);
    this.ended.add(session.id);
    if (this.ended.size > ENDED_SESSIONS_KEPT) this.ended.delete(this.ended.values().next().value!);
    this.sessions.delete(session.id);
    // The shell is gone: its `&` jobs go with the session (a hangup), nohup and setsid ones stay. Not on a
    // restart's handover (no tree): the next envd's session keeps them.
    if (session.proc.tree() !== undefined) {
      hangUp(session.pid, true);
      setTimeout(() => killHungUp(session.pid, true), HANGUP_GRACE_MS).unref();
    }
    this.processes.collect(session.proc);
    await rm(join(this.dir, `${session.id}.json`), { force: true }).catch((error: unknown) => this.logger.warn({ err: error, session: session.id }, 'could not remove the record of a session'));
  }

  /** Finds the sessions of a previous envd: a record whose command runs is a session again; the others are removed. */
  private async adopt(): Promise<void> {
    for (const name of await readdir(this.dir)) {
      const path = join(this.dir, name);
      const record = await readFile(path, 'utf8')
        .then((text) => JSON.parse(text) as SessionRecord)
        .catch(() => undefined);
      const proc = record && record.v === RECORD_VERSION ? this.processes.get(record.pid) : undefined;
      if (!record || !proc || proc.id !== record.command_id || !proc.running) {
        await rm(path, { force: true });
        continue;
      }
      const user = await resolveUser(record.user, 'session user').catch(() => undefined);
      if (!user) {
        await rm(path, { force: true });
        continue;
      }
      const session = new Session(proc, { id: record.id, user, shell: record.shell, startedAt: new Date(record.started_at) }, this.logger);
      this.track(session);
      // Followed at its next command (or now, if the holder answers): never holds envd's start.
      session.follow().catch((error: unknown) => this.logger.warn({ err: error, session: record.id }, 'cannot follow a re-adopted session yet'));
      this.logger.info({ session: record.id, pid: proc.pid }, 're-adopted a session');
    }
  }
}

/** Whether the shell's pid may belong to someone else by now (its holder reaped it); a handed-over one counts as reaped. */
function shellReaped(session: Session): boolean {
  return session.proc.tree()?.leaderReaped ?? true;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}
