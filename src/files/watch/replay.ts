export type ChangeType = 'create' | 'modify' | 'delete';

/** What node:fs `fs.watch` reports: 'rename' for IN_CREATE, IN_DELETE and IN_MOVED_*, 'change' for IN_MODIFY and IN_ATTRIB. */
export type RawKind = 'rename' | 'change';

export interface RawEvent {
  kind: RawKind;
  name: string;
}

export interface NamedChange {
  type: ChangeType;
  name: string;
}

/**
 * Turns the raw events one directory delivered together into changes, in
 * their order. fs.watch does not say whether a 'rename' made a name appear or
 * disappear; what is at the name now (`exists`, asked once per name after
 * every event of the batch happened) and how many renames the name had do:
 * they alternate between appearing and disappearing and end in the present
 * state. So a temporary file created and removed at once is `create`, `delete`
 * (not two deletes), and a 'change' is reported only while the name exists.
 */
export function replayEvents(events: readonly RawEvent[], exists: (name: string) => boolean): NamedChange[] {
  const renames = new Map<string, number>();
  for (const { kind, name } of events) if (kind === 'rename') renames.set(name, (renames.get(name) ?? 0) + 1);
  const changes: NamedChange[] = [];
  for (const { kind, name } of events) {
    // Renames of this name still to come in the batch: each flips whether it exists.
    const left = renames.get(name) ?? 0;
    const existsAfterThem = exists(name);
    if (kind === 'rename') {
      renames.set(name, left - 1);
      const existsNow = (left - 1) % 2 === 0 ? existsAfterThem : !existsAfterThem;
      changes.push({ type: existsNow ? 'create' : 'delete', name });
    } else if (left % 2 === 0 ? existsAfterThem : !existsAfterThem) {
      changes.push({ type: 'modify', name });
    }
  }
  return changes;
}
