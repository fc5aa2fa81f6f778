import { pino, type Logger } from 'pino';
import type { LogLevel } from './config.js';

export type { Logger };

/**
 * JSON lines on stdout, written synchronously by pino itself: no transports
 * (they load worker files at run time, which a one-file bundle cannot have).
 * Anything that may carry a token is redacted by path, as a second line of
 * defence behind never logging headers or bodies in the first place.
 */
export function createLogger(level: LogLevel, destination: pino.DestinationStream = pino.destination({ sync: true })): Logger {
  return pino(
    {
      level,
      base: { service: 'envd' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: ['req.headers.authorization', 'headers.authorization', 'authorization', 'access_token', 'token', '*.access_token', '*.token', 'body.access_token'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
