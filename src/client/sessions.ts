import type { Static } from '@sinclair/typebox';
import type { CreateSessionBody, SessionCommandBody, SessionCommandResult, SessionCreated, SessionEnded, SessionEvents, SessionList, SessionStreamBody } from '../sessions/schemas.js';
import type { CallOptions, Http } from './http.js';
import { parseSse, type EventOf } from './sse.js';

export type SessionInfo = Static<typeof SessionList>['sessions'][number];
export type SessionResult = Static<typeof SessionCommandResult>;
/** An event of a session command's stream: start, stdout/stderr, then exit (with `session_ended` when the command ended the shell), or error. */
export type SessionEvent = EventOf<typeof SessionEvents>;

/** /sessions: shells whose state carries from one command to the next. */
export class Sessions {
  constructor(private readonly http: Http) {}

  /** POST /sessions: a new shell, as a Session to run commands in. */
  async create(body: CreateSessionBody = {}, options: CallOptions = {}): Promise<Session> {
    const created = await this.http.json<Static<typeof SessionCreated>>('POST', '/sessions', { json: body, signal: options.signal });
    return new Session(this.http, created);
  }

  /** A session by id (one from list(), or another client's): no request until it is used. */
  get(id: string): Session {
    return new Session(this.http, { id });
  }

  /** GET /sessions: the live sessions. */
  async list(options: CallOptions = {}): Promise<SessionInfo[]> {
    return (await this.http.json<Static<typeof SessionList>>('GET', '/sessions', { signal: options.signal })).sessions;
  }
}

/** One session: run() a command for its result, stream() it for its events, end() the shell. */
export class Session {
  readonly id: string;
  /** What POST /sessions answered (absent for a session taken by id). */
  readonly created: Static<typeof SessionCreated> | undefined;

  constructor(
    private readonly http: Http,
    created: Static<typeof SessionCreated> | { id: string },
  ) {
    this.id = created.id;
    this.created = 'pid' in created ? created : undefined;
  }

  /** POST /sessions/{id}/commands: the command's result alone; EnvdError 409 while another runs, 410 once the session has ended. */
  run(cmd: string, options: Omit<SessionCommandBody, 'cmd'> & CallOptions = {}): Promise<SessionResult> {
    const { signal, ...body } = options;
    return this.http.json('POST', `/sessions/${this.id}/commands`, { json: { cmd, ...body }, signal });
  }

  /** POST /sessions/{id}/commands/stream: the same events as a command stream. Breaking out of the loop interrupts the command. */
  async *stream(cmd: string, options: Omit<SessionStreamBody, 'cmd'> & CallOptions = {}): AsyncGenerator<SessionEvent> {
    const { signal, ...body } = options;
    const abort = new AbortController();
    signal?.addEventListener('abort', () => abort.abort(signal.reason), { once: true });
    const response = await this.http.send('POST', `/sessions/${this.id}/commands/stream`, { json: { cmd, ...body }, signal: abort.signal });
    try {
      for await (const event of parseSse(response.body!)) yield event as SessionEvent;
    } finally {
      abort.abort();
    }
  }

  /** DELETE /sessions/{id}: the shell and its jobs end (nohup and setsid ones live on). */
  async end(options: CallOptions = {}): Promise<void> {
    await this.http.json<Static<typeof SessionEnded>>('DELETE', `/sessions/${this.id}`, { signal: options.signal });
  }
}
