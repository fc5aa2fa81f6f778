import { pino } from 'pino';
import { Writable } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import type { FastifyBaseLogger } from 'fastify';
import { lazyRequestLogger } from '../src/request-logger.js';

function capture(level: string) {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  return { logger: pino({ level }, sink), lines };
}

describe('the request logger', () => {
  it('makes no pino child while nothing is written at an enabled level', () => {
    const { logger } = capture('info');
    const child = vi.spyOn(logger, 'child');
    const log = lazyRequestLogger(logger as unknown as FastifyBaseLogger, { reqId: 'r1' }, {});
    log.debug({ a: 1 }, 'not written');
    log.trace('nor this');
    expect(child).not.toHaveBeenCalled();
  });

  it('writes enabled lines with the request bindings, through one child made once', async () => {
    const { logger, lines } = capture('info');
    const child = vi.spyOn(logger, 'child');
    const log = lazyRequestLogger(logger as unknown as FastifyBaseLogger, { reqId: 'r2' }, {});
    log.info({ status: 200 }, 'request');
    log.warn('second');
    log.debug('skipped');
    await new Promise((r) => setImmediate(r));
    expect(child).toHaveBeenCalledTimes(1);
    expect(lines.map((l) => [l.reqId, l.msg, l.level])).toEqual([
      ['r2', 'request', 30],
      ['r2', 'second', 40],
    ]);
    expect(lines[0]!.status).toBe(200);
    expect((log.child({ feature: 'x' }) as unknown as pino.Logger).bindings()).toMatchObject({ reqId: 'r2', feature: 'x' });
  });

  it('gives a route with its own level a real child at once', () => {
    const { logger } = capture('info');
    const log = lazyRequestLogger(logger as unknown as FastifyBaseLogger, { reqId: 'r3' }, { level: 'debug' });
    expect(log.level).toBe('debug');
  });
});
