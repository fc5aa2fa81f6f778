import { Commands } from './commands.js';
import { Files } from './files.js';
import { Http, type ClientOptions } from './http.js';
import { Lifecycle } from './lifecycle.js';
import { Ports } from './ports.js';
import { SearchFiles } from './search.js';
import { Snapshot } from './snapshot.js';
import { Sessions } from './sessions.js';
import { Services } from './services.js';

export { EnvdError, type CallOptions, type ClientOptions } from './http.js';
export type { CommandEvent, CommandResult, ExitInfo, ProcessInfo, SignalName, StartBody, StreamBody, StreamOptions } from './commands.js';
export type { FileEntry, WatchEvent } from './files.js';
export type { PortEvent, PortInfo } from './ports.js';
export type { Session, SessionEvent, SessionInfo, SessionResult } from './sessions.js';
export type { ServiceDefinition, ServiceLogsPage, ServiceRecord } from './services.js';
export { parseSse, type SseEvent } from './sse.js';
export type { PrepareRequest, PrepareResult, ThawResult } from './snapshot.js';
export type { EditRequest, FindRequest, FoundEntry, SearchMatch, SearchRequest, SearchSummary } from './search.js';

/** A typed client of one envd: `client.commands`, `client.sessions`, `client.files`, `client.lifecycle`, `client.ports`, `client.snapshot`. */
export class EnvdClient {
  readonly commands: Commands;
  readonly files: Files;
  readonly lifecycle: Lifecycle;
  /** Content search, find, line ranges, exact edits. */
  readonly search: SearchFiles;
  /** Prepare for a snapshot, thaw after one. */
  readonly snapshot: Snapshot;
  /** Listening ports and their changes. */
  readonly ports: Ports;
  /** Shells whose state carries from one command to the next. */
  readonly sessions: Sessions;
  /** Supervised commands: define, control, read their output. */
  readonly services: Services;
  /** The base URL (no trailing slash) and token this client was made with. */
  readonly baseUrl: string;
  readonly token: string | undefined;

  constructor(options: ClientOptions) {
    const http = new Http(options);
    this.baseUrl = http.base;
    this.token = options.token;
    this.commands = new Commands(http);
    this.files = new Files(http);
    this.lifecycle = new Lifecycle(http);
    this.search = new SearchFiles(http);
    this.snapshot = new Snapshot(http);
    this.ports = new Ports(http);
    this.sessions = new Sessions(http);
    this.services = new Services(http);
  }
}
