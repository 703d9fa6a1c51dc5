// A real Node.js database client for the capture tests (capture/node_test.go):
// node-postgres (pg) or mysql2, over TLS and in plaintext from one process.
//   node client.js pg|mysql PORT TOKEN N [--early] [--wait] [--tls-only] [--seconds S] [--conns C]
// Per round i and mode (tls, plain) it sends the marked statements
//   pg:    'n-TOKEN-MODE-s-i' (simple protocol) and 'n-TOKEN-MODE-e-i' (extended: Parse/Bind/Execute)
//   mysql: 'n-TOKEN-MODE-s-i' (COM_QUERY) and 'n-TOKEN-MODE-e-i' (COM_STMT_PREPARE/EXECUTE)
// --early opens one more TLS connection before --wait (a connection older than
// the capture) and queries on it too ('n-TOKEN-early-s-i'); --wait reads a
// line from standard input before the rounds; --tls-only skips the plaintext
// connection; --seconds S runs rounds until S seconds have passed (N is then
// the least); --conns C opens C connections of each mode, which run their
// rounds side by side (the bench's load). Prints "ready" once connected and, at the end, "done QUERIES
// SECONDS" (the statements sent, the rounds' time).
// Resolve the packages with NODE_PATH=/var/cache/cistern/node/node_modules.
'use strict';
const [kind, port, tok, nArg, ...flags] = process.argv.slice(2);
const n = Number(nArg);
const early = flags.includes('--early');
const wait = flags.includes('--wait');
const tlsOnly = flags.includes('--tls-only');
const si = flags.indexOf('--seconds');
const seconds = si >= 0 ? Number(flags[si + 1]) : 0;
const ci = flags.indexOf('--conns');
const nconns = ci >= 0 ? Number(flags[ci + 1]) : 1;
const tlsOpt = { rejectUnauthorized: false };

function pgConn(tls) {
  const { Client } = require('pg');
  const c = new Client({ host: '127.0.0.1', port: Number(port), user: process.env.CISTERN_DB_USER || 'postgres',
    password: process.env.CISTERN_DB_PASSWORD, database: 'postgres', ssl: tls ? tlsOpt : false });
  return {
    open: () => c.connect(),
    simple: (mark) => c.query(`SELECT '${mark}' AS mark`),
    extended: (mark, i) => c.query({ text: `SELECT '${mark}' AS mark, $1::int AS i`, values: [i] }),
    close: () => c.end(),
  };
}

function myConn(tls) {
  const mysql = require('mysql2/promise');
  let c;
  return {
    open: async () => {
      c = await mysql.createConnection({ host: '127.0.0.1', port: Number(port), user: process.env.CISTERN_DB_USER || 'root',
        password: process.env.CISTERN_DB_PASSWORD, ssl: tls ? tlsOpt : undefined, connectTimeout: 600000 });
    },
    simple: (mark) => c.query(`SELECT '${mark}' AS mark`),
    extended: (mark, i) => c.execute(`SELECT '${mark}' AS mark, ? AS i`, [i]),
    close: () => c.end(),
  };
}

async function main() {
  const mk = kind === 'pg' ? pgConn : myConn;
  let old;
  if (early) {
    old = mk(true);
    await old.open();
  }
  console.log('ready');
  if (wait) await new Promise((r) => process.stdin.once('data', r));
  const lanes = [];
  for (let l = 0; l < nconns; l++) {
    lanes.push(tlsOnly ? [['tls', mk(true)]] : [['tls', mk(true)], ['plain', mk(false)]]);
  }
  for (const conns of lanes) for (const [, c] of conns) await c.open();
  const t0 = process.hrtime.bigint();
  const elapsed = () => Number(process.hrtime.bigint() - t0) / 1e9;
  let sent = 0;
  await Promise.all(lanes.map(async (conns, l) => {
    for (let i = 0; i < n || elapsed() < seconds; i++) {
      for (const [mode, c] of conns) {
        await c.simple(`n-${tok}-${mode}-s-${i}`);
        await c.extended(`n-${tok}-${mode}-e-${i}`, i);
        sent += 2;
      }
      if (old && l === 0) {
        await old.simple(`n-${tok}-early-s-${i}`);
        sent++;
      }
    }
  }));
  const secs = elapsed();
  for (const conns of lanes) for (const [, c] of conns) await c.close();
  if (old) await old.close();
  console.log(`done ${sent} ${secs}`);
}
main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
