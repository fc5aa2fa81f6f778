import type { Static } from '@sinclair/typebox';
import type { EditBody, Edited, Entry, FileContent } from '../files/schemas.js';
import type { FindQuery, SearchBody } from '../files/search/schemas.js';
import type { CallOptions, Http } from './http.js';

export type SearchRequest = Static<typeof SearchBody>;
export type FindRequest = Static<typeof FindQuery>;
export type EditRequest = Static<typeof EditBody>;

// The NDJSON lines' types are the server's own (type-only: nothing of the server is bundled).
export type { SearchMatch, SearchSummary } from '../files/search/search.js';
import type { SearchMatch, SearchSummary } from '../files/search/search.js';

export type FoundEntry = Static<typeof Entry> & { path_base64?: string };

/** Content search, find, line ranges and exact edits: the routes an agent edits code with. */
export class SearchFiles {
  constructor(private readonly http: Http) {}

  /** POST /files/search: each match as it is found, the summary last. Aborting the signal stops the search in envd. */
  async *search(body: SearchRequest, options: CallOptions = {}): AsyncGenerator<SearchMatch | SearchSummary> {
    const response = await this.http.send('POST', '/files/search', { json: body, signal: options.signal });
    let pending = '';
    const decoder = new TextDecoder();
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      pending += decoder.decode(chunk, { stream: true });
      let newline: number;
      while ((newline = pending.indexOf('\n')) !== -1) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        if (line) yield JSON.parse(line);
      }
    }
  }

  /** GET /files/find: entry infos of what matches the glob (ripgrep's ignore rules). */
  find(query: FindRequest, options: CallOptions = {}): Promise<{ entries: FoundEntry[]; truncated: boolean }> {
    return this.http.json('GET', '/files/find', { query, signal: options.signal });
  }

  /** GET /files with from_line and lines: a range of lines of a file of any size. */
  readLines(path: string, range: { from_line?: number; lines?: number; encoding?: 'utf8' | 'base64' }, options: CallOptions = {}): Promise<Static<typeof FileContent>> {
    return this.http.json('GET', '/files', { query: { path, from_line: range.from_line ?? 1, ...range }, signal: options.signal });
  }

  /** POST /files/edit: exact edits, all or nothing; a 409 (EnvdError) leaves the file as it was. */
  edit(body: EditRequest, options: CallOptions = {}): Promise<Static<typeof Edited>> {
    return this.http.json('POST', '/files/edit', { json: body, signal: options.signal });
  }
}
