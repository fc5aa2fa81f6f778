// The holder's C in one direction (issue 38): calls run down from the loop
// (holder.c) to the output paths to the kept log, and no two units call each
// other, however indirectly; no unit shares a variable with another, so state
// goes down by pointer. gcc's own call graph (-fcallgraph-info, one .ci file
// per unit) and nm's symbol table say so, from the sources as they are.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const SOURCES = 'src/holder';

let dir: string;
let units: string[];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'envd-call-graph-'));
  units = readdirSync(SOURCES).filter((name) => name.endsWith('.c')).map((name) => basename(name, '.c')).sort();
  // -O0: every call in the source is a call in the graph (nothing inlined away).
  for (const unit of units)
    execFileSync('cc', ['-std=c11', '-O0', '-fcallgraph-info', '-c', '-o', join(dir, `${unit}.o`), join(SOURCES, `${unit}.c`)], { cwd: process.cwd() });
});
afterAll(() => dir && rmSync(dir, { recursive: true, force: true }));

/** `unit -> units it calls` from the .ci files: a callee defined in another unit is an edge to it. */
function fileCallGraph(): Map<string, Set<string>> {
  const definedIn = new Map<string, string>(); // extern function -> its unit
  const perUnit = units.map((unit) => {
    const text = readFileSync(join(dir, `${unit}.ci`), 'utf8');
    // A node without `shape : ellipse` is a function this unit defines; an ellipse is only declared here.
    const defined = new Set([...text.matchAll(/^node: \{ title: "([^"]+)" label: "[^"]*"(?! shape)/gm)].map((m) => m[1]!));
    const callees = [...text.matchAll(/^edge: \{ sourcename: "[^"]+" targetname: "([^"]+)"/gm)].map((m) => m[1]!);
    return { unit, defined, callees };
  });
  for (const { unit, defined } of perUnit) for (const name of defined) if (!definedIn.has(name)) definedIn.set(name, unit);
  const graph = new Map<string, Set<string>>();
  for (const { unit, defined, callees } of perUnit) {
    const to = new Set<string>();
    for (const callee of callees) {
      const target = defined.has(callee) ? unit : definedIn.get(callee);
      if (target && target !== unit) to.add(target);
    }
    graph.set(unit, to);
  }
  return graph;
}

/** A cycle of units as `a -> b -> a`, or undefined. */
function findCycle(graph: Map<string, Set<string>>): string | undefined {
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (unit: string): string | undefined => {
    if (state.get(unit) === 'done') return undefined;
    if (state.get(unit) === 'open') return [...path.slice(path.indexOf(unit)), unit].join(' -> ');
    state.set(unit, 'open');
    path.push(unit);
    for (const next of graph.get(unit) ?? []) {
      const cycle = visit(next);
      if (cycle) return cycle;
    }
    path.pop();
    state.set(unit, 'done');
    return undefined;
  };
  for (const unit of graph.keys()) {
    const cycle = visit(unit);
    if (cycle) return cycle;
  }
  return undefined;
}

describe("the holder's C units", () => {
  it('call each other in one direction only: the file-level call graph has no cycle', () => {
    const graph = fileCallGraph();
    // The graph is real: the loop drives the units below it.
    expect([...graph.get('holder')!]).toEqual(expect.arrayContaining(['start', 'output', 'live', 'kept']));
    expect(findCycle(graph)).toBeUndefined();
  });

  it('finds a cycle when there is one (the check itself)', () => {
    const graph = new Map([
      ['holder', new Set(['live'])],
      ['live', new Set(['kept'])],
      ['kept', new Set(['fail'])],
      ['fail', new Set(['live'])],
    ]);
    expect(findCycle(graph)).toBe('live -> kept -> fail -> live');
  });

  it('share no variables: every file-level variable is static to the unit that owns it', () => {
    const exported = units.flatMap((unit) =>
      execFileSync('nm', ['--defined-only', join(dir, `${unit}.o`)], { encoding: 'utf8' })
        .split('\n')
        .map((line) => line.trim().split(/\s+/))
        // B/D/R/C/G/S: a variable (bss, data, read-only, common, small data) other units could name.
        .filter((fields) => fields.length === 3 && /^[BDRCGS]$/.test(fields[1]!))
        .map((fields) => `${unit}.c: ${fields[2]}`),
    );
    expect(exported).toEqual([]);
  });
});
