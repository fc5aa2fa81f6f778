export interface SseEvent {
  event: string;
  data: any;
  /** The event's `id:` (resumable output), with readEvents(response, { ids: true }). */
  id?: string;
}

/**
 * Parses a text/event-stream body as it arrives; comments (keep-alives) are yielded as event ':'.
 * With `ids`, an event's `id:` line is kept in `id` (left out otherwise, so events compare as they always did).
 */
export async function* readEvents(response: Response, { ids = false } = {}): AsyncGenerator<SseEvent> {
  if (!response.body) throw new Error('no body');
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      let id: string | undefined;
      const data: string[] = [];
      let comment = false;
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) comment = true;
        else if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('id:')) id = line.slice(3).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length > 0) yield { event, data: JSON.parse(data.join('\n')), ...(ids && id !== undefined ? { id } : {}) };
      else if (comment) yield { event: ':', data: block };
    }
  }
}

/** Every event of a stream until it ends (with `ids`, their ids too). */
export async function collectEvents(response: Response, options: { ids?: boolean } = {}): Promise<SseEvent[]> {
  const events: SseEvent[] = [];
  for await (const event of readEvents(response, options)) if (event.event !== ':') events.push(event);
  return events;
}
