import type { FastifyBaseLogger } from 'fastify';
import type { Bindings, ChildLoggerOptions, LevelWithSilent } from 'pino';

type Level = Exclude<LevelWithSilent, 'silent'>;
type LogCall = (...args: unknown[]) => void;
/** envd's logger is pino's, which has isLevelEnabled (fastify's type leaves it out). */
type PinoLogger = FastifyBaseLogger & { isLevelEnabled(level: string): boolean };

/**
 * fastify's `childLoggerFactory`: a request's logger that makes its pino
 * child (the request id bound) only when a line is written at an enabled
 * level. fastify otherwise makes one per request, serialising its bindings
 * and rebuilding its methods, and most requests write nothing (each route's
 * one line is at info, /health's at debug): under load that child was ~10 %
 * of envd's requests per second (interleaved HTTP floor, 67-69k -> 76k/s).
 */
export function lazyRequestLogger(parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  // A route with its own level or serializers gets a real child at once: not worth a second path.
  if (options.level !== undefined || options.serializers !== undefined) return parent.child(bindings, options);
  return new LazyChild(parent as PinoLogger, bindings) as unknown as FastifyBaseLogger;
}

/** Methods on the prototype: a request pays for one small object, not six closures. */
class LazyChild {
  #child: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: PinoLogger,
    private readonly bindings: Bindings,
  ) {}

  get level(): string {
    return this.parent.level;
  }

  isLevelEnabled(level: string): boolean {
    return this.parent.isLevelEnabled(level);
  }

  fatal(...args: unknown[]): void {
    this.write('fatal', args);
  }

  error(...args: unknown[]): void {
    this.write('error', args);
  }

  warn(...args: unknown[]): void {
    this.write('warn', args);
  }

  info(...args: unknown[]): void {
    this.write('info', args);
  }

  debug(...args: unknown[]): void {
    this.write('debug', args);
  }

  trace(...args: unknown[]): void {
    this.write('trace', args);
  }

  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.real().child(bindings, options);
  }

  private write(level: Level, args: unknown[]): void {
    if (this.parent.isLevelEnabled(level)) (this.real()[level] as LogCall)(...args);
  }

  private real(): FastifyBaseLogger {
    return (this.#child ??= this.parent.child(this.bindings));
  }
}
