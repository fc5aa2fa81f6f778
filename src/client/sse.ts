import type { Static, TSchema } from '@sinclair/typebox';

/** One server-sent event: its name, its id (if any) and its data parsed as JSON. */
export interface SseEvent {
  event: string;
  id: string | undefined;
  data: unknown;
}

/** Reads a text/event-stream body as events, in order; comments (keep-alives) are skipped. */
export async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  let event = 'message';
  let id: string | undefined;
  let data: string[] = [];
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline;
    while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
      if (line === '') {
        if (data.length > 0) yield { event, id, data: JSON.parse(data.join('\n')) };
        event = 'message';
        id = undefined;
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'event') event = value;
      else if (field === 'id') id = value;
      else if (field === 'data') data.push(value);
    }
  }
}

/** The events of a stream whose map (event name to data schema) is `M`: one member per name, its data typed. */
export type EventOf<M extends Record<string, TSchema>> = { [K in keyof M & string]: { event: K; id: string | undefined; data: Static<M[K]> } }[keyof M & string];
