import { describe, expect, it } from 'vitest';
import { replayEvents, type RawEvent } from '../../src/files/watch/replay.js';

const rename = (name: string): RawEvent => ({ kind: 'rename', name });
const change = (name: string): RawEvent => ({ kind: 'change', name });
const present = (...names: string[]) => (name: string) => names.includes(name);

describe('replayEvents', () => {
  it('tells a created name from a deleted one by what is there now', () => {
    expect(replayEvents([rename('new'), rename('old')], present('new'))).toEqual([
      { type: 'create', name: 'new' },
      { type: 'delete', name: 'old' },
    ]);
  });

  it('replays a name that came and went within one batch in its order', () => {
    expect(replayEvents([rename('t'), change('t'), rename('t')], present())).toEqual([
      { type: 'create', name: 't' },
      { type: 'modify', name: 't' },
      { type: 'delete', name: 't' },
    ]);
  });

  it('replays a name deleted and created again (an editor saving) as delete, then create', () => {
    expect(replayEvents([rename('f'), rename('f'), change('f')], present('f'))).toEqual([
      { type: 'delete', name: 'f' },
      { type: 'create', name: 'f' },
      { type: 'modify', name: 'f' },
    ]);
  });

  it('reports a change while the name existed, and drops one to a name that does not (the directory itself)', () => {
    expect(replayEvents([change('gone'), rename('gone')], present())).toEqual([
      { type: 'modify', name: 'gone' },
      { type: 'delete', name: 'gone' },
    ]);
    expect(replayEvents([change('ghost')], present())).toEqual([]);
  });

  it('keeps the order of events across names', () => {
    const events = [rename('a'), rename('b'), change('a'), rename('a')];
    expect(replayEvents(events, present('b')).map((c) => `${c.type} ${c.name}`)).toEqual(['create a', 'create b', 'modify a', 'delete a']);
  });
});
