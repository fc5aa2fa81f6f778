import { describe, expect, it } from 'vitest';
import { AccessToken, bearerToken } from '../src/auth.js';

describe('AccessToken', () => {
  it('matches only the current token, after rotation too', () => {
    const token = new AccessToken();
    expect(token.isSet).toBe(false);
    expect(token.matches('')).toBe(false);
    token.set('first');
    expect(token.matches('first')).toBe(true);
    expect(token.matches('firs')).toBe(false);
    expect(token.matches('first-and-more')).toBe(false);
    token.set('second');
    expect(token.matches('first')).toBe(false);
    expect(token.matches('second')).toBe(true);
  });

  it('parses Bearer headers strictly', () => {
    expect(bearerToken('Bearer abc')).toBe('abc');
    expect(bearerToken('bearer abc')).toBe('abc');
    expect(bearerToken('Basic abc')).toBeUndefined();
    expect(bearerToken('Bearer')).toBeUndefined();
    expect(bearerToken('Bearer a b')).toBeUndefined();
    expect(bearerToken(undefined)).toBeUndefined();
  });
});
