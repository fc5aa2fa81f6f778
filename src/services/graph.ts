/**
 * The dependency graph of services: name → the names it depends on. Pure
 * functions, so that PUT and the boot files judge it the same way.
 */
export type DependencyGraph = ReadonlyMap<string, readonly string[]>;

/** A cycle reachable from `from` (its names, the first again at the end: a → b → a), or undefined. */
export function findCycle(graph: DependencyGraph, from: string): string[] | undefined {
  const path: string[] = [];
  const onPath = new Set<string>();
  const done = new Set<string>();
  const visit = (name: string): string[] | undefined => {
    if (onPath.has(name)) return [...path.slice(path.indexOf(name)), name];
    if (done.has(name)) return undefined;
    onPath.add(name);
    path.push(name);
    for (const next of graph.get(name) ?? []) {
      const cycle = visit(next);
      if (cycle) return cycle;
    }
    path.pop();
    onPath.delete(name);
    done.add(name);
    return undefined;
  };
  return visit(from);
}

/** The names in an order where each comes after what it depends on (those in a cycle in any order, last). */
export function dependencyOrder(graph: DependencyGraph): string[] {
  const order: string[] = [];
  const placed = new Set<string>();
  const visiting = new Set<string>();
  const place = (name: string) => {
    if (placed.has(name) || visiting.has(name)) return;
    visiting.add(name);
    for (const next of graph.get(name) ?? []) if (graph.has(next)) place(next);
    visiting.delete(name);
    placed.add(name);
    order.push(name);
  };
  for (const name of [...graph.keys()].sort()) place(name);
  return order;
}
