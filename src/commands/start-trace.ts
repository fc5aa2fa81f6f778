import { AsyncLocalStorage } from 'node:async_hooks';
import { createWriteStream } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';

/**
 * A diagnostic, off unless ENVD_START_TRACE is set (docs/operations.md): for
 * each `POST /commands`, one line on stderr with the milliseconds between the
 * steps of its start, so that a slow start under load can be told apart
 * (issues 36 and 45): waiting on the event loop, envd's own preparation, the
 * spawner and holder (fork, pipes, the shell's fork, the pid file), the shell
 * itself, and the answer.
 *
 *   start-trace at 35290123.456 total 23.4 received>handler 0.2 handler>prepared 0.4 ... result-read>finish 0.3
 *
 * `at` is the request's arrival on the monotonic clock (CLOCK_MONOTONIC, ms), to line a
 * line up with other traces: a holder's or the kernel's.
 *
 * The steps are marked where they happen (markStart), found through the
 * request's async context; with the variable unset nothing is stored and a
 * mark is one undefined check.
 */
const storage = process.env.ENVD_START_TRACE ? new AsyncLocalStorage<[string, number][]>() : undefined;
/** An absolute path instead of 1: the lines are appended to that file (a bench that keeps only the end of envd's stderr). */
const traceFile = process.env.ENVD_START_TRACE?.startsWith('/') ? createWriteStream(process.env.ENVD_START_TRACE, { flags: 'a' }) : undefined;
const writeLine = (line: string) => (traceFile ?? process.stderr).write(`${line}\n`);
const received = new WeakMap<IncomingMessage, number>();

/** True when start tracing is on (the app adds its onRequest hook then). */
export const startTraceEnabled = storage !== undefined;

/** Notes when a request was parsed: called from an onRequest hook. */
export function noteReceived(request: IncomingMessage): void {
  received.set(request, performance.now());
}

/** Starts the marks of one command's request; its line is written once the answer is. */
export function traceCommandStart(request: IncomingMessage, response: ServerResponse, write: (line: string) => void = writeLine): void {
  if (!storage) return;
  const marks: [string, number][] = [['received', received.get(request) ?? performance.now()], ['handler', performance.now()]];
  storage.enterWith(marks);
  response.once('finish', () => {
    marks.push(['finish', performance.now()]);
    write(formatMarks(marks));
  });
}

/** Marks one step of the current request's command start (nothing outside a traced request). */
export function markStart(step: string): void {
  storage?.getStore()?.push([step, performance.now()]);
}

/** The line for one request's marks (performance.now() times, the first the arrival). */
export function formatMarks(marks: [string, number][]): string {
  const steps = marks.slice(1).map(([step, at], i) => `${marks[i]![0]}>${step} ${(at - marks[i]![1]).toFixed(1)}`);
  // performance.now() counts from the process's start; hrtime is the monotonic clock itself.
  const offset = Number(process.hrtime.bigint()) / 1e6 - performance.now();
  return `start-trace at ${(marks[0]![1] + offset).toFixed(3)} total ${(marks.at(-1)![1] - marks[0]![1]).toFixed(1)} ${steps.join(' ')}`;
}
