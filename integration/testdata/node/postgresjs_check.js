// postgres.js through mzproxy: node postgresjs_check.js <url> <table>, run
// by TestDriverMatrix (integration/driver_matrix_test.go says what each
// case does).
//
// postgres.js sends every tagged-template query with the extended protocol
// (also those without parameters) as a named statement it prepares once per
// connection and caches by query text. A parameter whose type it cannot
// tell from the JavaScript value (numbers and strings) is typed by the
// server: the first execution sends Parse and Describe alone, then Bind and
// Execute with the types PostgreSQL described. It pipelines queries issued
// together on one connection. int8 values come back as strings.
'use strict';
const postgres = require('postgres');
const { Cases, expect, expectCode } = require('./matrix');

async function main() {
  const [url, table] = process.argv.slice(2);
  // One connection, so that every case runs in the same session.
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  const t = sql(table);
  const cases = new Cases();
  const count = async () => Number((await sql`SELECT count(*) FROM ${t}`.values())[0][0]);
  let ts;
  // postgres.js refuses an undefined parameter in a way that stalls the
  // connection: fail the AS OF cases plainly when mz_now_param did not run.
  const mzNow = () => {
    expect(ts !== undefined, 'no timestamp from mz_now_param');
    return ts;
  };

  await cases.run('ddl', () => sql`CREATE TABLE ${t} (k int PRIMARY KEY, v text)`);
  await cases.run('insert', async () => {
    for (const [k, v] of [[1, 'one'], [2, 'two'], [3, 'three']]) {
      const res = await sql`INSERT INTO ${t} VALUES (${k}, ${v})`;
      expect(res.count === 1, 'count ' + res.count);
    }
  });
  await cases.run('update', async () => {
    const res = await sql`UPDATE ${t} SET v = ${'uno'} WHERE k = ${1}`;
    expect(res.count === 1, 'count ' + res.count);
  });
  await cases.run('select', async () => {
    const [row] = await sql`SELECT v FROM ${t} WHERE k = ${1}`;
    expect(row && row.v === 'uno', 'got ' + JSON.stringify(row));
  });
  await cases.run('mz_now_param', async () => {
    const [row] = await sql`SELECT v, mz_now() FROM ${t} WHERE k = ${1}`;
    expect(row && row.v === 'uno' && BigInt(row.mz_now) > 0n, 'got ' + JSON.stringify(row));
    ts = row.mz_now;
  });
  await cases.run('plain_after_mz_now', async () => {
    const [row] = await sql`SELECT 1 AS one`;
    expect(row.one === 1, 'got ' + JSON.stringify(row));
  });
  await cases.run('param_after_mz_now', async () => {
    const [row] = await sql`SELECT ${42}::int AS v`;
    expect(row.v === 42, 'got ' + JSON.stringify(row));
  });
  await cases.run('as_of_param', async () => {
    await sql`UPDATE ${t} SET v = ${'eins'} WHERE k = ${1}`;
    const [row] = await sql`SELECT v FROM ${t} WHERE k = ${1} AS OF ${mzNow()}`;
    expect(row && row.v === 'uno', 'got ' + JSON.stringify(row));
  });
  await cases.run('as_of_at_least_param', async () => {
    const [row] = await sql`SELECT v FROM ${t} WHERE k = ${1} AS OF AT LEAST ${mzNow()}`;
    expect(row && (row.v === 'uno' || row.v === 'eins'), 'got ' + JSON.stringify(row));
  });
  await cases.run('mz_now_repeated', async () => {
    // Runs of reads of the present between writes (the read guard learns
    // the settled count of writes and reads through it).
    let last = 0n;
    for (let i = 0; i < 12; i++) {
      const want = 'r' + Math.floor(i / 4);
      if (i % 4 === 0) await sql`UPDATE ${t} SET v = ${want} WHERE k = ${1}`;
      const [row] = await sql`SELECT v, mz_now() FROM ${t} WHERE k = ${1}`;
      expect(row && row.v === want && BigInt(row.mz_now) >= last, `read ${i}: got ${JSON.stringify(row)}, want ${want} at or after ${last}`);
      last = BigInt(row.mz_now);
    }
    await sql`UPDATE ${t} SET v = ${'eins'} WHERE k = ${1}`; // the later cases' row
  });
  await cases.run('rollback', async () => {
    const rollBack = new Error('roll back');
    try {
      await sql.begin(async (tx) => {
        await tx`DELETE FROM ${t} WHERE k = ${2}`;
        throw rollBack;
      });
    } catch (e) {
      if (e !== rollBack) throw e;
    }
    expect((await count()) === 3, 'rows after the rollback');
  });
  await cases.run('unique_violation', async () => {
    await expectCode(() => sql`INSERT INTO ${t} VALUES (${1}, ${'dup'})`, '23505');
    expect((await count()) === 3, 'rows after the violation');
  });
  await cases.run('timeout', async () => {
    await sql`SET statement_timeout = '100ms'`;
    await expectCode(() => sql`SELECT pg_sleep(5)`, '57014');
    await sql`RESET statement_timeout`;
    const [row] = await sql`SELECT 1 AS one`;
    expect(row.one === 1, 'SELECT 1 after the timeout');
  });

  await cases.run('unprepared', async () => {
    // prepare: false: unnamed statements; then a simple Query.
    const sql2 = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
    try {
      const [row] = await sql2`SELECT v, mz_now() FROM ${sql2(table)} WHERE k = ${3}`;
      expect(row && row.v === 'three' && BigInt(row.mz_now) > 0n, 'got ' + JSON.stringify(row));
      const [plain] = await sql2`SELECT 1 AS one`.simple();
      expect(plain.one === 1, 'simple query ' + JSON.stringify(plain));
      const [param] = await sql2`SELECT ${7}::int AS v`;
      expect(param.v === 7, 'parameterized query ' + JSON.stringify(param));
    } finally {
      await sql2.end();
    }
  });
  await cases.run('pipelined', async () => {
    // Queries issued together go out before their answers are read.
    const [ins, now, plain, param] = await Promise.all([
      sql`INSERT INTO ${t} VALUES (${20}, ${'p'})`,
      sql`SELECT v, mz_now() FROM ${t} WHERE k = ${3}`,
      sql`SELECT 1 AS one`,
      sql`SELECT ${21}::int * 2 AS v`,
    ]);
    expect(ins.count === 1, 'insert count ' + ins.count);
    expect(now[0].v === 'three' && BigInt(now[0].mz_now) > 0n, 'mz_now() read ' + JSON.stringify(now[0]));
    expect(plain[0].one === 1 && param[0].v === 42, 'plain and parameterized reads');
  });

  await cases.run('repeated_ts_reads', async () => {
    // The same timestamped reads eight times each, prepared (named, cached
    // by postgres.js) and unprepared (the unnamed statement, which the
    // event loop binds to a statement of the proxy's from the second use):
    // each answers its own key, mz_now() never goes back, AS OF $n reads
    // the past.
    const sql2 = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
    try {
      for (const q of [sql, sql2]) {
        let last = 0n;
        for (let i = 0; i < 8; i++) {
          const k = 2 + (i % 2);
          const [row] = await q`SELECT v, mz_now() FROM ${q(table)} WHERE k = ${k}`;
          const want = k === 2 ? 'two' : 'three';
          expect(row && row.v === want && BigInt(row.mz_now) >= last, `read ${i}: ${JSON.stringify(row)}, want ${want} at or after ${last}`);
          last = BigInt(row.mz_now);
        }
        for (let i = 0; i < 6; i++) {
          const [row] = await q`SELECT v FROM ${q(table)} WHERE k = ${1} AS OF ${mzNow()}`;
          expect(row && row.v === 'uno', `AS OF read ${i}: ${JSON.stringify(row)}`);
        }
      }
    } finally {
      await sql2.end();
    }
  });

  await sql.end();
  cases.finish();
}

main().catch((e) => {
  console.error('FAILED:', e);
  process.exit(1);
});
