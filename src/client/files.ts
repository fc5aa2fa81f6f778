import type { Static } from '@sinclair/typebox';
import type { BatchBody, BatchWritten, Entry, EntryList, Exists, Extracted, FileContent, Made, Removed, WatchBody, WatchEvents, WriteBody, Written } from '../files/schemas.js';
import type { CallOptions, Http } from './http.js';
import { parseSse, type EventOf } from './sse.js';

export type FileEntry = Static<typeof Entry>;
/** An event of a watch, typed by its name from the schemas of the document's `x-events` (WatchEvents). */
export type WatchEvent = EventOf<typeof WatchEvents>;

/** /files: upload, download, read, write, batch, info, list, rename, mkdir, remove, watch. */
export class Files {
  constructor(private readonly http: Http) {}

  /** PUT /files/raw: raw bytes (a stream is sent as it comes). */
  upload(path: string, data: BodyInit, query: { username?: string } = {}, options: CallOptions = {}): Promise<Static<typeof Written>> {
    return this.http.json('PUT', '/files/raw', { query: { path, ...query }, body: data, headers: { 'content-type': 'application/octet-stream' }, signal: options.signal });
  }

  /** GET /files/raw: the response, whose body streams the bytes (`range` like `bytes=0-99`). */
  download(path: string, options: CallOptions & { range?: string } = {}): Promise<Response> {
    return this.http.send('GET', '/files/raw', { query: { path }, headers: options.range ? { range: options.range } : {}, signal: options.signal });
  }

  /** POST /files. */
  write(body: Static<typeof WriteBody>, options: CallOptions = {}): Promise<Static<typeof Written>> {
    return this.http.json('POST', '/files', { json: body, signal: options.signal });
  }

  /** GET /files. */
  read(path: string, query: { encoding?: 'utf8' | 'base64' } = {}, options: CallOptions = {}): Promise<Static<typeof FileContent>> {
    return this.http.json('GET', '/files', { query: { path, ...query }, signal: options.signal });
  }

  /** POST /files/batch: all or nothing. */
  writeBatch(body: Static<typeof BatchBody>, options: CallOptions = {}): Promise<Static<typeof BatchWritten>> {
    return this.http.json('POST', '/files/batch', { json: body, signal: options.signal });
  }

  async exists(path: string, options: CallOptions = {}): Promise<boolean> {
    return (await this.http.json<Static<typeof Exists>>('GET', '/files/exists', { query: { path }, signal: options.signal })).exists;
  }

  /** GET /files/info; with `checksum: 'sha256'` a regular file's sha256 too. */
  info(path: string, query: { checksum?: 'sha256' } = {}, options: CallOptions = {}): Promise<FileEntry> {
    return this.http.json('GET', '/files/info', { query: { path, ...query }, signal: options.signal });
  }

  /** GET /files/archive: the response, whose body streams a tar (or tar.gz) of the directory (`sha256: true`: with each file's sha256 in it, tar/checksums.ts). */
  downloadArchive(path: string, query: { format?: 'tar' | 'tar.gz'; sha256?: boolean } = {}, options: CallOptions = {}): Promise<Response> {
    return this.http.send('GET', '/files/archive', { query: { path, ...query }, signal: options.signal });
  }

  /** PUT /files/archive: extracts a tar or tar.gz (a stream is sent as it comes) into `path`, all or nothing. */
  uploadArchive(path: string, archive: BodyInit, query: { mode?: 'create' | 'merge' | 'replace'; username?: string } = {}, options: CallOptions = {}): Promise<Static<typeof Extracted>> {
    return this.http.json('PUT', '/files/archive', { query: { path, ...query }, body: archive, headers: { 'content-type': 'application/octet-stream' }, signal: options.signal });
  }

  async list(path: string, query: { depth?: number } = {}, options: CallOptions = {}): Promise<FileEntry[]> {
    return (await this.http.json<Static<typeof EntryList>>('GET', '/files/list', { query: { path, ...query }, signal: options.signal })).entries;
  }

  rename(from: string, to: string, options: CallOptions = {}): Promise<FileEntry> {
    return this.http.json('POST', '/files/rename', { json: { from, to }, signal: options.signal });
  }

  mkdir(path: string, body: { username?: string } = {}, options: CallOptions = {}): Promise<Static<typeof Made>> {
    return this.http.json('POST', '/files/mkdir', { json: { path, ...body }, signal: options.signal });
  }

  async remove(path: string, options: CallOptions = {}): Promise<boolean> {
    return (await this.http.json<Static<typeof Removed>>('DELETE', '/files', { query: { path }, signal: options.signal })).removed;
  }

  /** POST /files/watch: `ready`, then `change` events until the signal aborts. */
  async *watch(body: Static<typeof WatchBody>, options: CallOptions = {}): AsyncGenerator<WatchEvent> {
    const response = await this.http.send('POST', '/files/watch', { json: body, signal: options.signal });
    for await (const event of parseSse(response.body!)) yield event as WatchEvent;
  }
}
