import type { Static } from '@sinclair/typebox';
import type {
  CommandEvents,
  CommandStats,
  AttachQuery,
  BackgroundStarted,
  CommandResult,
  ExitInfo,
  Killed,
  OutputQuery,
  ProcessInfo,
  ProcessList,
  ResizeBody,
  SignalName,
  StartBody,
  StreamBody,
} from '../commands/schemas.js';
import { EnvdError, type CallOptions, type Http } from './http.js';
import { parseSse, type EventOf } from './sse.js';

export type { CommandResult, ExitInfo, ProcessInfo, SignalName, StartBody, StreamBody };

/**
 * An event of a command stream, typed by its name from the schemas the OpenAPI document's `x-events`
 * shows (CommandEvents). `id` is the resume position `<stdout>-<stderr>` on output events.
 * An output event's `data` is text, or with `encoding: 'base64'` the chunk's raw bytes base64-encoded.
 */
export type CommandEvent = EventOf<typeof CommandEvents>;

export interface StreamOptions extends CallOptions {
  /** Resume after this event id (what the last output event carried). */
  from?: Static<typeof AttachQuery>['from'];
  /** Reconnect (resuming from the last id, so nothing twice and nothing skipped) when the connection drops; at most this many times in a row. */
  reconnect?: number;
  /** Attach: output events carry text (utf8, the default) or each chunk's raw bytes in base64 (stream(): the body's `encoding`). */
  encoding?: 'utf8' | 'base64';
}

type Foreground = Omit<StartBody, 'background'> & { background?: false };

/** /commands: run, stream, attach, stdin, signal, wait, kill, list. */
export class Commands {
  constructor(private readonly http: Http) {}

  /** POST /commands in the foreground: the result when it ends. */
  run(body: Foreground, options: CallOptions = {}): Promise<CommandResult> {
    return this.http.json('POST', '/commands', { json: body, signal: options.signal });
  }

  /** POST /commands with background: true: the pid at once. */
  start(body: Omit<StartBody, 'background'>, options: CallOptions = {}): Promise<Static<typeof BackgroundStarted>> {
    return this.http.json('POST', '/commands', { json: { ...body, background: true }, signal: options.signal });
  }

  /**
   * POST /commands/stream: start and follow. By the contract the command is killed when this connection
   * drops; with `reconnect` the client then still gets everything it printed until then (GET
   * /commands/{pid}/stream from the last id). Work that must outlive a dropped connection: start() and attach().
   */
  async *stream(body: StreamBody, options: StreamOptions = {}): AsyncGenerator<CommandEvent> {
    const response = await this.http.send('POST', '/commands/stream', { json: body, signal: options.signal });
    yield* this.follow(response, undefined, { ...options, ...(body.encoding ? { encoding: body.encoding } : {}) });
  }

  /** GET /commands/{pid}/stream: replay what is kept (or from `from`), then follow live. */
  async *attach(pid: number, options: StreamOptions = {}): AsyncGenerator<CommandEvent> {
    const response = await this.http.send('GET', `/commands/${pid}/stream`, { query: { from: options.from, encoding: options.encoding }, signal: options.signal });
    yield* this.follow(response, pid, options);
  }

  private async *follow(response: Response, pid: number | undefined, options: StreamOptions): AsyncGenerator<CommandEvent> {
    let last = options.from;
    let retries = 0;
    for (;;) {
      let ended = false;
      try {
        for await (const event of parseSse(response.body!)) {
          const typed = event as CommandEvent;
          if (typed.event === 'start') {
            pid = typed.data.pid;
            // A resumed stream says start again; the caller has seen it.
            if (retries > 0 || last !== options.from) continue;
          }
          if ('id' in typed && typed.id) last = typed.id;
          retries = 0;
          yield typed;
          if (typed.event === 'exit') ended = true;
        }
      } catch (error) {
        if (options.signal?.aborted || !options.reconnect || pid === undefined) throw error;
      }
      if (ended) return;
      if (!options.reconnect || pid === undefined || retries >= options.reconnect) throw new EnvdError(0, 'the stream ended before the command did');
      retries += 1;
      await new Promise((resolve) => setTimeout(resolve, 100 * retries));
      response = await this.http.send('GET', `/commands/${pid}/stream`, { query: { from: last, encoding: options.encoding }, signal: options.signal });
    }
  }

  /** GET /commands/{pid}/stats: what its cgroup uses (409 EnvdError where envd runs without cgroups). */
  stats(pid: number, options: CallOptions = {}): Promise<Static<typeof CommandStats>> {
    return this.http.json('GET', `/commands/${pid}/stats`, { signal: options.signal });
  }

  /** GET /commands/{pid}/output: kept bytes of one stream. */
  async output(pid: number, query: Static<typeof OutputQuery> = {}, options: CallOptions = {}): Promise<Uint8Array> {
    const response = await this.http.send('GET', `/commands/${pid}/output`, { query, signal: options.signal });
    return new Uint8Array(await response.arrayBuffer());
  }

  /** GET /commands/{pid}/wait: the result when it ends (408 EnvdError after `timeout_ms`). */
  wait(pid: number, query: { timeout_ms?: number } = {}, options: CallOptions = {}): Promise<CommandResult> {
    return this.http.json('GET', `/commands/${pid}/wait`, { query, signal: options.signal });
  }

  /** GET /commands/{pid}/ready: `after_ms` once ready (408 EnvdError past `timeout_ms`; 409 if it ended first). */
  ready(pid: number, query: { timeout_ms?: number } = {}, options: CallOptions = {}): Promise<{ after_ms: number }> {
    return this.http.json('GET', `/commands/${pid}/ready`, { query, signal: options.signal });
  }

  /** GET /commands: the tracked commands (`finished: true` also lists collected ones). */
  async list(query: { finished?: boolean } = {}, options: CallOptions = {}): Promise<ProcessInfo[]> {
    return (await this.http.json<Static<typeof ProcessList>>('GET', '/commands', { query, signal: options.signal })).processes;
  }

  /** POST /commands/{pid}/stdin: text (written as UTF-8) or bytes (sent as data_base64), exactly as given. */
  async sendStdin(pid: number, data: string | Uint8Array, options: CallOptions = {}): Promise<void> {
    const json = typeof data === 'string' ? { data } : { data_base64: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64') };
    await this.http.send('POST', `/commands/${pid}/stdin`, { json, signal: options.signal });
  }

  /** DELETE /commands/{pid}/stdin: EOF. */
  async closeStdin(pid: number, options: CallOptions = {}): Promise<void> {
    await this.http.send('DELETE', `/commands/${pid}/stdin`, { signal: options.signal });
  }

  /** POST /commands/{pid}/signal to the process group. */
  async signal(pid: number, signal: SignalName, options: CallOptions = {}): Promise<void> {
    await this.http.send('POST', `/commands/${pid}/signal`, { json: { signal }, signal: options.signal });
  }

  /** POST /commands/{pid}/resize of its terminal. */
  async resize(pid: number, size: ResizeBody, options: CallOptions = {}): Promise<void> {
    await this.http.send('POST', `/commands/${pid}/resize`, { json: size, signal: options.signal });
  }

  /** DELETE /commands/{pid}: kill the tree and forget it. */
  async kill(pid: number, options: CallOptions = {}): Promise<boolean> {
    return (await this.http.json<Static<typeof Killed>>('DELETE', `/commands/${pid}`, { signal: options.signal })).killed;
  }
}
