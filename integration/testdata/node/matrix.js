// Case reporting shared by the node driver programs of the driver matrix
// (integration/driver_matrix_test.go): each case prints "ok <case>" or
// "FAIL <case>: <detail>" and the next case runs anyway; finish() exits 1
// when any case failed.
'use strict';

class CheckFailed extends Error {}

function expect(cond, what) {
  if (!cond) throw new CheckFailed(what);
}

class Cases {
  constructor() {
    this.failed = [];
  }

  async run(name, fn) {
    try {
      await fn();
      console.log('ok ' + name);
    } catch (e) {
      this.failed.push(name);
      const code = e.code ? ` (SQLSTATE ${e.code})` : '';
      console.log(`FAIL ${name}: ${String(e.message || e).replace(/\s+/g, ' ')}${code}`);
      console.error(e);
    }
  }

  finish() {
    process.exitCode = this.failed.length ? 1 : 0;
  }
}

// expectCode runs fn, which must fail with SQLSTATE code.
async function expectCode(fn, code) {
  try {
    await fn();
  } catch (e) {
    expect(e.code === code, `code ${e.code} (${e.message}), want ${code}`);
    return;
  }
  throw new CheckFailed(`succeeded, want SQLSTATE ${code}`);
}

module.exports = { Cases, expect, expectCode };
