// Finds the SQL databases the outbox's tests and bench use: PG_URL and MYSQL_URL if set, else PostgreSQL
// on 127.0.0.1:5432 and MariaDB/MySQL on 127.0.0.1:3306. One installed here but stopped is started (the
// Debian packages' commands); one that is not installed is reported by the tests that need it, with what
// to install. Tests create a schema or database of their own and drop only that.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { connect } from 'node:net';

export const POSTGRES_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

/** Whether something answers TCP at the URL's host and port within `timeoutMs`. */
export function answers(url, timeoutMs = 1000) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port) });
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

async function waitUntilAnswers(url, ms) {
  for (const until = Date.now() + ms; Date.now() < until;) {
    if (await answers(url, 500)) return true;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return false;
}

/** How to start each one here when it is installed and stopped (Debian packages). */
const STARTERS = {
  postgres: () => {
    if (!existsSync('/etc/postgresql')) return false;
    for (const version of readdirSync('/etc/postgresql')) {
      spawnSync('pg_ctlcluster', ['--skip-systemctl-redirect', version, 'main', 'start'], { stdio: 'ignore' });
    }
    return true;
  },
  mysql: () => {
    if (!existsSync('/usr/sbin/mariadbd')) return false;
    spawnSync('start-stop-daemon', ['--start', '--oknodo', '--background', '--exec', '/usr/sbin/mariadbd'], {
      stdio: 'ignore',
    });
    return true;
  },
};

/** Each database's URL and whether it answers (started here first when installed and stopped). */
export async function findDatabases() {
  const found = {};
  for (const [name, url] of [
    ['postgres', POSTGRES_URL],
    ['mysql', MYSQL_URL],
  ]) {
    let up = await answers(url);
    if (!up && !process.env[name === 'postgres' ? 'PG_URL' : 'MYSQL_URL'] && STARTERS[name]()) {
      up = await waitUntilAnswers(url, 30_000);
    }
    found[name] = { url, up };
  }
  return found;
}
