import { describe, expect, it } from 'vitest';
import { requiredLiteral } from '../../src/files/search/required-literal.js';

describe('requiredLiteral', () => {
  it('takes the most telling run of plain characters every match contains', () => {
    expect(requiredLiteral('function\\s+\\w+Sync\\(')).toBe('Sync(');
    expect(requiredLiteral('function\\s+\\w+sync')).toBe('function');
    expect(requiredLiteral('\\w+Sync\\(')).toBe('Sync(');
    expect(requiredLiteral('^import .* from')).toBe('import ');
    expect(requiredLiteral('a\\.b\\/c')).toBe('a.b/c');
  });

  it('leaves out a character a quantifier makes optional or repeats', () => {
    expect(requiredLiteral('colou?r')).toBe('colo');
    expect(requiredLiteral('abcd*e')).toBe('abc');
    expect(requiredLiteral('ab{0,2}cd')).toBe('cd');
    expect(requiredLiteral('wxy+z')).toBe('wx');
  });

  it('skips classes and groups, which may hold anything or nothing', () => {
    expect(requiredLiteral('(foo|bar)baz')).toBe('baz');
    expect(requiredLiteral('[)(]abc')).toBe('abc');
    expect(requiredLiteral('(?:a(b)c)?de')).toBe('de');
  });

  it('gives nothing for a top-level alternation, an escape by number, or no run of two', () => {
    expect(requiredLiteral('foo|bar')).toBeUndefined();
    expect(requiredLiteral('\\x41bcd')).toBeUndefined();
    expect(requiredLiteral('a.b')).toBeUndefined();
    expect(requiredLiteral('(unclosed')).toBeUndefined();
    expect(requiredLiteral('é+x')).toBeUndefined();
  });
});
