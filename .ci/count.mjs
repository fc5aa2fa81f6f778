// Adds up vitest's JSON reports into the one line CI reads: "N passed, M failed".
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
let passed = 0;
let failed = 0;
let skipped = 0;
for (const file of readdirSync(dir).filter((f) => f.endsWith('.json'))) {
  const report = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  passed += report.numPassedTests;
  // A suite that failed to load counts as a failure even with no test in it.
  failed += report.numFailedTests + (report.numFailedTestSuites > 0 && report.numFailedTests === 0 ? 1 : 0);
  skipped += report.numPendingTests + report.numTodoTests;
  // The names of what failed go just above the count, so that the tail of a long log says it.
  for (const suite of report.testResults ?? []) {
    const failures = (suite.assertionResults ?? []).filter((test) => test.status === 'failed');
    if (suite.status === 'failed' && failures.length === 0) console.log(`FAILED ${file}: ${suite.name}: ${firstLine(suite.message)}`);
    for (const test of failures) console.log(`FAILED ${file}: ${test.fullName}: ${firstLine(test.failureMessages?.[0])}`);
  }
}
function firstLine(text) {
  return String(text ?? '').split('\n')[0].slice(0, 300);
}

console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
