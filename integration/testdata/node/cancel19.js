// Timeouts from node-postgres: node cancel19.js <url>, run by
// TestCancel19NodePostgres (integration/cancel19_test.go) through mzproxy
// and directly, whose outputs must be the same (the cases of
// testdata/python/cancel19.py). statement_timeout: the client's config
// option (a startup parameter), the statement sleeps 30 s; query_timeout
// (the statement's own): node-postgres gives up waiting after 1 s and
// sends no cancel, so the statement, which sleeps 3 s, runs to its end (an
// autocommit write lands, a block is not aborted) and the connection's
// next query waits for it. Each case on a connection of its
// own, all at once; one line each.
'use strict';
const { Client } = require('pg');

const url = process.argv[2];
const ops = {
  read: (t, s) => [`SELECT count(*) FROM ${t}, pg_sleep(${s}) WHERE k = $1`, [1]],
  write: (t, s) => [`UPDATE ${t} SET v = v + 1 WHERE k = (SELECT $1::int FROM pg_sleep(${s}))`, [1]],
  ddl: (t, s) => [`CREATE TABLE ${t}_ctas AS SELECT k FROM ${t}, pg_sleep(${s})`, []],
};
// Client options, and the sleeping statement's own.
const mechs = {
  statement_timeout: [{ statement_timeout: 1000 }, {}],
  query_timeout: [{}, { query_timeout: 1000 }],
};

function described(e) {
  if (!e) return 'none';
  return e.code ? `${e.code} ${e.message}` : e.message;
}

async function run(op, mech, block) {
  const name = `${op}_${mech}_${block ? 'block' : 'autocommit'}`;
  const t = `c19_${name}`;
  const line = [];
  const client = new Client({ connectionString: url, ...mechs[mech][0] });
  await client.connect();
  if (block) await client.query('BEGIN');
  const [text, values] = ops[op](t, mech === 'query_timeout' ? 3 : 30);
  let err = null;
  try {
    await client.query({ text, values, ...mechs[mech][1] });
  } catch (e) {
    err = e;
  }
  line.push('stmt=' + described(err));
  if (block) {
    err = null;
    try {
      await client.query('SELECT 1');
    } catch (e) {
      err = e;
    }
    line.push('in_block=' + described(err));
    await client.query('ROLLBACK');
  }
  line.push('next=' + (await client.query({ text: 'SELECT 41 + 1', rowMode: 'array' })).rows[0][0]);
  const after = await client.query({
    text: `SELECT v::text || ' ' || (to_regclass('${t}_ctas') IS NULL)::text FROM ${t} WHERE k = 1`,
    rowMode: 'array',
  });
  line.push('after=' + after.rows[0][0]);
  await client.end();
  return `${name}: ${line.join('; ')}`;
}

(async () => {
  const todo = [];
  for (const op of Object.keys(ops))
    for (const mech of Object.keys(mechs))
      for (const block of [false, true]) todo.push([op, mech, block]);
  const setup = new Client({ connectionString: url });
  await setup.connect();
  for (const [op, mech, block] of todo) {
    const t = `c19_${op}_${mech}_${block ? 'block' : 'autocommit'}`;
    await setup.query(`CREATE TABLE ${t} (k int PRIMARY KEY, v int)`);
    await setup.query(`INSERT INTO ${t} VALUES (1, 0)`);
  }
  await setup.end();
  const lines = await Promise.all(todo.map((c) => run(...c)));
  lines.sort();
  for (const l of lines) console.log(l);
})().catch((e) => {
  console.log('FAIL ' + e.stack);
  process.exit(1);
});
