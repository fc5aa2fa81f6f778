import type { Socket } from 'node:net';

/**
 * Bytes all forwarded connections together may hold in envd's write buffers:
 * read from one side, not yet taken by the other side's kernel. Each
 * direction already stops reading while its destination is full (one chunk of
 * at most 64 KiB, libuv's read size, over the socket's high-water mark); this
 * bounds all of them together, so a thousand slow clients cannot make envd
 * hold a thousand times that. Past it every direction pauses until the total
 * is back under half: the total never passes this by more than one chunk.
 */
export const FORWARD_BUFFER_BYTES = 4 * 1024 * 1024;

/**
 * One direction of a forwarded connection, paused for either of two reasons
 * (its destination is full, or all forwards together are), resumed when
 * neither holds.
 */
class Direction {
  waitingDrain = false;
  waitingRoom = false;

  constructor(
    readonly from: Socket,
    readonly to: Socket,
  ) {}

  stop(): void {
    this.from.pause();
  }

  resumeIfFree(): void {
    if (!this.waitingDrain && !this.waitingRoom && !this.from.destroyed) this.from.resume();
  }
}

/** What the forwarded connections hold, and every direction that copies, to pause them all at once. */
export class ForwardBuffers {
  held = 0;
  private full = false;
  private readonly directions = new Set<Direction>();

  constructor(readonly limit = FORWARD_BUFFER_BYTES) {}

  add(direction: Direction): void {
    this.directions.add(direction);
    if (this.full) this.hold(direction);
  }

  remove(direction: Direction): void {
    this.directions.delete(direction);
  }

  take(bytes: number): void {
    this.held += bytes;
    if (this.full || this.held <= this.limit) return;
    this.full = true;
    for (const direction of this.directions) this.hold(direction);
  }

  give(bytes: number): void {
    this.held -= bytes;
    if (!this.full || this.held > this.limit / 2) return;
    this.full = false;
    for (const direction of this.directions) {
      direction.waitingRoom = false;
      direction.resumeIfFree();
    }
  }

  private hold(direction: Direction): void {
    direction.waitingRoom = true;
    direction.stop();
  }
}

/**
 * Copies one direction of a forwarded connection: every byte, in order, and
 * the end (a half-close: `from` sent FIN, so `to` gets one, while the other
 * direction goes on). Reading pauses while `to` cannot take more, or while
 * all forwards together hold FORWARD_BUFFER_BYTES.
 */
export function pump(from: Socket, to: Socket, buffers: ForwardBuffers): void {
  const direction = new Direction(from, to);
  buffers.add(direction);
  from.on('data', (chunk: Buffer) => {
    const length = chunk.length;
    buffers.take(length);
    if (to.write(chunk, () => buffers.give(length)) || direction.waitingDrain) return;
    direction.waitingDrain = true;
    direction.stop();
    to.once('drain', () => {
      direction.waitingDrain = false;
      direction.resumeIfFree();
    });
  });
  from.once('end', () => {
    if (!to.destroyed) to.end();
  });
  from.once('close', () => buffers.remove(direction));
}
