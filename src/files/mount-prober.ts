import { spawn, type ChildProcess } from 'node:child_process';
import type { Mount } from './mount-guard.js';

/**
 * A question to a mount: when it was asked (performance.now(): `/init` may set
 * the wall clock back or forth, never this), and a promise kept when the mount
 * has answered (never rejected).
 */
export interface Question {
  since: number;
  answered: Promise<void>;
}

/**
 * One `envd-holder --probe MOUNTPOINT` process (src/holder/probe.h), kept
 * for its mount and asked again for every request on it: a byte written is a
 * statfs asked, a byte read back is the mount's answer. One question at a
 * time; a request that comes while one waits shares it. Kept rather than
 * started per request: a spawn from envd costs ~6 ms, a question ~80 µs.
 */
export class MountProber {
  private readonly child: ChildProcess;
  private question: (Question & { settle: () => void }) | undefined;
  private ended = false;
  /** When a request last needed it: the one used longest ago makes room for another mount's. */
  lastUsed = performance.now();

  constructor(
    holder: string,
    readonly mount: Mount,
    private readonly onEnd: () => void,
  ) {
    this.child = spawn(holder, ['--probe', mount.point], { stdio: ['pipe', 'pipe', 'ignore'] });
    this.child.stdout!.on('data', () => this.settle());
    // A write to a probe that has died: its exit says so.
    this.child.stdin!.on('error', () => {});
    this.child.once('error', () => this.end());
    this.child.once('exit', () => this.end());
  }

  /** Since when the question in flight has waited; undefined when none waits. */
  get waitingSince(): number | undefined {
    return this.question?.since;
  }

  /** Asks the mount whether it answers, or joins the question already asked. A probe that could not start lets everything through. */
  ask(): Question {
    this.lastUsed = performance.now();
    if (this.question) return this.question;
    if (this.ended) return { since: performance.now(), answered: Promise.resolve() };
    let settle!: () => void;
    const answered = new Promise<void>((resolve) => (settle = resolve));
    this.question = { since: performance.now(), answered, settle };
    this.child.stdin!.write('?');
    return this.question;
  }

  /** Ends it: EOF for one that waits for nothing, SIGKILL for one blocked in its mount (NFS and FUSE wait killably). */
  stop(): void {
    if (this.question) this.child.kill('SIGKILL');
    else this.child.stdin!.end();
  }

  private settle(): void {
    const question = this.question;
    this.question = undefined;
    question?.settle();
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    this.settle();
    this.onEnd();
  }
}
