import { describe, expect, it } from 'vitest';
import {
  encodeDirectGo,
  encodeDirectOff,
  encodeDirectOn,
  encodeDirectPing,
  encodeLiveOff,
  encodeLiveOn,
  encodeResize,
  encodeStdin,
  encodeStdinEof,
  FrameDecoder,
  MAX_MESSAGE_PAYLOAD,
  MessageDecoder,
  PROTOCOL_VERSION,
  type HolderMessage,
} from '../../src/holder/protocol.js';

const message = (type: number, payload: number[] | Buffer) => {
  const body = Buffer.from(payload);
  const header = Buffer.alloc(5);
  header[0] = type;
  header.writeUInt32LE(body.length, 1);
  return Buffer.concat([header, body]);
};

const u64 = (n: number) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(n));
  return [...b];
};
const i32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32LE(n);
  return [...b];
};
const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return [...b];
};

// One of each holder message, as a holder of protocol 3 lays them out (HELLO first: it sets the version).
const wire: [Buffer, HolderMessage][] = [
  [
    message(0x80, [3, 0, ...u32(4242), 1, ...i32(-1), ...i32(9), 1, 0, ...u64(2 ** 40 + 3)]),
    { type: 'hello', version: 3, shellPid: 4242, reaped: true, exitCode: -1, signal: 9, truncated: { stdout: true, stderr: false }, logEnd: 2 ** 40 + 3 },
  ],
  [message(0x81, u64(12)), { type: 'sync', logEnd: 12 }],
  [message(0x82, [2, ...u64(99), 0x68, 0x69]), { type: 'data', stream: 'stderr', logEnd: 99, bytes: Buffer.from('hi') }],
  [message(0x86, [1, ...u64(100), 0x5c, 0x6e]), { type: 'text', stream: 'stdout', logEnd: 100, json: Buffer.from('\\n') }],
  [message(0x83, [...u32(7), 2]), { type: 'ack', id: 7, status: 2 }],
  [message(0x84, [...i32(3), ...i32(0)]), { type: 'reaped', exitCode: 3, signal: 0 }],
  [message(0x85, [...i32(-1), ...i32(15), 0, 1, ...u64(5)]), { type: 'exit', exitCode: -1, signal: 15, truncated: { stdout: false, stderr: true }, logEnd: 5 }],
  [message(0x87, []), { type: 'direct-ready' }],
  [message(0x88, [...u64(77), 0]), { type: 'direct-ended', logEnd: 77, reason: 'off' }],
  [message(0x88, [...u64(78), 1]), { type: 'direct-ended', logEnd: 78, reason: 'refused' }],
  [message(0x88, [...u64(79), 2]), { type: 'direct-ended', logEnd: 79, reason: 'failed' }],
];

// Protocol 4: where each stream's output is, in SYNC, DATA, TEXT and DIRECT_ENDED.
const wire4: [Buffer, HolderMessage][] = [
  [
    message(0x80, [4, 0, ...u32(7), 0, ...i32(-1), ...i32(0), 0, 0, ...u64(3)]),
    { type: 'hello', version: 4, shellPid: 7, reaped: false, exitCode: -1, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: 3 },
  ],
  [message(0x81, [...u64(12), ...u64(2 ** 33), ...u64(5)]), { type: 'sync', logEnd: 12, offsets: { stdout: 2 ** 33, stderr: 5 } }],
  [message(0x82, [2, ...u64(99), ...u64(8), 0x68, 0x69]), { type: 'data', stream: 'stderr', logEnd: 99, offset: 8, bytes: Buffer.from('hi') }],
  [message(0x86, [1, ...u64(100), ...u64(41), 0x5c, 0x6e]), { type: 'text', stream: 'stdout', logEnd: 100, offset: 41, json: Buffer.from('\\n') }],
  [message(0x88, [...u64(77), 1, ...u64(6), ...u64(9)]), { type: 'direct-ended', logEnd: 77, reason: 'refused', offsets: { stdout: 6, stderr: 9 } }],
];

describe('holder protocol', () => {
  it('encodes envd\'s messages as type, u32 LE length, payload', () => {
    expect(PROTOCOL_VERSION).toBe(4);
    expect([...encodeLiveOn()]).toEqual([1, 0, 0, 0, 0]);
    expect([...encodeLiveOn(true)]).toEqual([1, 1, 0, 0, 0, 1]);
    expect([...encodeLiveOff()]).toEqual([2, 0, 0, 0, 0]);
    expect([...encodeStdin(0x01020304, Buffer.from('ab'))]).toEqual([3, 6, 0, 0, 0, 4, 3, 2, 1, 0x61, 0x62]);
    expect([...encodeStdinEof(5)]).toEqual([4, 4, 0, 0, 0, 5, 0, 0, 0]);
    expect([...encodeResize(6, 300, 2)]).toEqual([5, 8, 0, 0, 0, 6, 0, 0, 0, 44, 1, 2, 0]);
    expect([...encodeDirectOn(0x0a0b, 24, 2 ** 40 + 5, true)]).toEqual([6, 17, 0, 0, 0, 0x0b, 0x0a, 0, 0, 24, 0, 0, 0, ...u64(2 ** 40 + 5), 1]);
    expect([...encodeDirectOn(1, 3, 9, false)]).toEqual([6, 17, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, ...u64(9), 0]);
    expect([...encodeDirectGo()]).toEqual([7, 0, 0, 0, 0]);
    expect([...encodeDirectOff()]).toEqual([8, 0, 0, 0, 0]);
    expect([...encodeDirectPing()]).toEqual([9, 0, 0, 0, 0]);
  });

  it('limits a STDIN message to MAX_MESSAGE_PAYLOAD and rejects out-of-range fields', () => {
    expect(encodeStdin(1, Buffer.alloc(MAX_MESSAGE_PAYLOAD - 4)).length).toBe(5 + MAX_MESSAGE_PAYLOAD);
    expect(() => encodeStdin(1, Buffer.alloc(MAX_MESSAGE_PAYLOAD - 3))).toThrow(RangeError);
    expect(() => encodeResize(1, 65536, 10)).toThrow(RangeError);
    expect(() => encodeStdinEof(-1)).toThrow(RangeError);
    expect(() => encodeDirectOn(1, 3, -1, true)).toThrow(RangeError);
    expect(() => encodeDirectOn(1, 3, 2 ** 64, true)).toThrow(RangeError);
  });

  it('decodes every holder message of protocols 3 and 4, whole or split at any byte', () => {
    for (const messages of [wire, wire4]) {
      const all = Buffer.concat(messages.map(([bytes]) => bytes));
      const expected = messages.map(([, decoded]) => decoded);
      for (const size of [1, 2, 3, 7, 64, all.length]) {
        const decoder = new MessageDecoder();
        const got: HolderMessage[] = [];
        for (let offset = 0; offset < all.length; offset += size) {
          decoder.push(all.subarray(offset, offset + size));
          for (let next = decoder.next(); next; next = decoder.next()) {
            if (next.type === 'hello') decoder.version = next.version;
            got.push(next);
          }
        }
        expect(got, `chunks of ${size}`).toEqual(expected);
        expect(decoder.buffered).toBe(0);
      }
    }
  });

  it('returns one message per next() so the caller can stop between them', () => {
    const decoder = new MessageDecoder();
    decoder.push(Buffer.concat([wire[1]![0], wire[3]![0]]));
    expect(decoder.next()).toEqual(wire[1]![1]);
    expect(decoder.buffered).toBe(wire[3]![0].length);
    expect(decoder.next()).toEqual(wire[3]![1]);
    expect(decoder.next()).toBeUndefined();
  });

  it('throws on bytes that are not a holder\'s instead of buffering them', () => {
    const unknown = new MessageDecoder();
    unknown.push(message(0x90, []));
    expect(() => unknown.next()).toThrow(/unknown type 0x90/);
    const huge = new MessageDecoder();
    huge.push(Buffer.from([0x82, 0xff, 0xff, 0xff, 0x00]));
    expect(() => huge.next()).toThrow(/payload of/);
    const short = new MessageDecoder();
    short.push(message(0x81, [1, 2, 3]));
    expect(() => short.next()).toThrow(/SYNC/);
  });

  it('reads segment frames across chunk borders and rejects a bad stream byte', () => {
    const frames = Buffer.from([1, 3, 0, 0, 0, 0x61, 0x62, 0x63, 2, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0x7a]);
    const decoder = new FrameDecoder();
    const got: [string, string][] = [];
    for (const byte of frames) {
      decoder.push(Buffer.from([byte]));
      for (let frame = decoder.next(); frame; frame = decoder.next()) got.push([frame.stream, frame.bytes.toString()]);
    }
    expect(got).toEqual([
      ['stdout', 'abc'],
      ['stderr', ''],
      ['stdout', 'z'],
    ]);
    expect(decoder.buffered).toBe(0);
    const bad = new FrameDecoder();
    bad.push(Buffer.from([3, 0, 0, 0, 0]));
    expect(() => bad.next()).toThrow(/unknown stream 3/);
  });
});
