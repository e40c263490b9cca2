// node scripts/test-apps.mjs: the starter apps of test/apps (what `nest new` generates for Nest 11, CommonJS
// with Jest, and Nest 12, ESM with Vitest, plus a tasks module, a hybrid main.ts and e2e specs) against
// the packed tarball, as a user installs it. For each app, in a fresh copy under .apps/: npm install (the
// app's lockfile pins everything else), its unchanged `npm test` and `npm run test:e2e` (which must exit
// by themselves), then `npm run build` and `node dist/main.js` serving one request.
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { findRedis, freePort, startRedisServer } from './redis-server.mjs';

const root = resolve(import.meta.dirname, '..');
const only = process.argv.slice(2);

function sh(command, args, cwd, env = process.env, timeoutMs = 600_000) {
  console.log(`$ (${cwd.replace(root + '/', '')}) ${command} ${args.join(' ')}`);
  const result = spawnSync(command, args, {
    cwd,
    env,
    encoding: 'utf8',
    timeout: timeoutMs,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  if (result.status !== 0) {
    process.stdout.write(output);
    throw new Error(
      `${command} ${args.join(' ')} failed in ${cwd} (exit ${result.status}${result.signal ? `, ${result.signal}` : ''})`,
    );
  }
  return { output, stdout: result.stdout ?? '' };
}

/**
 * The app's lockfile pins every dependency, but the tarball is built afresh each run: drop its recorded
 * checksum so npm takes the new build (anything else it pins stays pinned).
 */
function forgetTarballIntegrity(lockfile) {
  const lock = JSON.parse(readFileSync(lockfile, 'utf8'));
  const entry = lock.packages?.['node_modules/nestjs-redis-tasks'];
  if (entry) delete entry.integrity;
  writeFileSync(lockfile, `${JSON.stringify(lock, null, 2)}\n`);
}

async function servesOneRequest(dir, env) {
  const port = await freePort();
  const main = existsSync(join(dir, 'dist/main.js')) ? 'dist/main.js' : 'dist/src/main.js';
  const child = spawn(process.execPath, [main], {
    cwd: dir,
    env: { ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise((done) => child.once('exit', done));
  try {
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        const response = await fetch(`http://127.0.0.1:${port}/avatars/7/resize`, { method: 'POST' });
        const body = await response.json();
        if (response.status !== 201 || !/^[\w-]{8,64}$/.test(body.taskId))
          throw new Error(`unexpected answer ${response.status} ${JSON.stringify(body)}`);
        console.log(`node ${main} answered POST /avatars/7/resize with task ${body.taskId}`);
        return;
      } catch (error) {
        if (child.exitCode !== null || Date.now() > deadline)
          throw new Error(`node ${main} did not serve the request (${error.message}):\n${output}`, { cause: error });
        await new Promise((done) => setTimeout(done, 200));
      }
    }
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

/**
 * The hybrid main.ts started before Redis (a deploy where Redis comes up late, or an outage at boot): HTTP
 * answers at once (the starter's GET /), an emit fails fast instead of hanging, and once a Redis starts on
 * that port the worker starts consuming by itself and an emit is accepted.
 */
async function servesWhileRedisIsDown(dir, env) {
  const [port, redisPort] = [await freePort(), await freePort()];
  const main = existsSync(join(dir, 'dist/main.js')) ? 'dist/main.js' : 'dist/src/main.js';
  const child = spawn(process.execPath, [main], {
    cwd: dir,
    env: { ...env, PORT: String(port), REDIS_URL: `redis://127.0.0.1:${redisPort}` },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise((done) => child.once('exit', done));
  let server;
  const until = async (what, check, timeoutMs = 30_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        const found = await check();
        if (found) return found;
      } catch {
        // not yet
      }
      if (child.exitCode !== null || Date.now() > deadline)
        throw new Error(`node ${main} with Redis down: ${what} did not happen:\n${output}`);
      await new Promise((done) => setTimeout(done, 200));
    }
  };
  try {
    await until(
      'GET / answering while Redis is unreachable',
      async () => (await fetch(`http://127.0.0.1:${port}/`)).status === 200,
    );
    const refused = await fetch(`http://127.0.0.1:${port}/avatars/7/resize`, { method: 'POST' });
    if (refused.status < 500) throw new Error(`an emit with Redis down answered ${refused.status}, expected a 5xx`);
    if (/consuming/.test(output)) throw new Error(`the worker said it was consuming before Redis answered:\n${output}`);
    server = await startRedisServer([], redisPort);
    await until('the worker consuming once Redis answered', () => /consuming/.test(output));
    await until(
      'POST /avatars/7/resize accepted',
      async () => (await fetch(`http://127.0.0.1:${port}/avatars/7/resize`, { method: 'POST' })).status === 201,
    );
    console.log(
      `node ${main} served HTTP while Redis was down (an emit answered ${refused.status}), then consumed once Redis started`,
    );
  } finally {
    child.kill('SIGTERM');
    await exited;
    await server?.stop();
  }
}

/**
 * The starter's own plain e2e test (GET /, `app.init()` in beforeEach, `app.close()` after) unchanged, its
 * AppModule importing RedisTaskModule, with Redis unreachable: it passes within the runner's default hook
 * timeout (nothing in Nest's bootstrap waits for Redis) and the runner exits by itself (no handle left).
 */
async function starterE2eWithRedisDown(dir, name, env) {
  const down = { ...env, REDIS_URL: `redis://127.0.0.1:${await freePort()}` };
  const spec = 'test/app.e2e-spec.ts';
  const args = name.includes('cjs') ? ['--', '--detectOpenHandles', spec] : ['--', spec];
  const { output } = sh('npm', ['run', 'test:e2e', ...args], dir, down, 120_000);
  if (/open handle|did not exit|close timed out|prevents .* from exiting/i.test(output))
    throw new Error(`${name}: the plain e2e test with Redis down left open handles:\n${output}`);
  if (!/1 passed/.test(output)) throw new Error(`${name}: the plain e2e test with Redis down did not pass:\n${output}`);
  console.log(`${name}: the starter's plain e2e test passed and exited with Redis unreachable`);
}

/**
 * Every `npm i` line of the README's bash blocks that applies to this app's Nest major (a line ending in
 * `# Nest 11` is for Nest 11 apps; a line naming no major is for both) resolves in the fresh app, with the
 * packed tarball for the package itself: what a user types after `nest new`.
 */
function readmeInstallLines(dir, name) {
  const major = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).dependencies['@nestjs/core'].match(
    /\d+/,
  )[0];
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```bash\n([\s\S]*?)```/g)].map(([, body]) => body);
  const lines = blocks.flatMap((body) => body.split('\n')).filter((line) => /^npm i(nstall)? [^&]/.test(line));
  let checked = 0;
  for (const line of lines) {
    const [command, comment = ''] = line.split(/\s+#\s*/);
    const majors = [...comment.matchAll(/Nest (\d+)/g)].map(([, m]) => m);
    if (majors.length > 0 && !majors.includes(major)) continue;
    const specs = command.trim().split(/\s+/).slice(2);
    // As `nest new` made the app: without the packages the line installs (a starter that has them already
    // would keep its own version and prove nothing), its lockfile pinning the rest.
    const pristine = join(dir, '.install-check');
    rmSync(pristine, { recursive: true, force: true });
    mkdirSync(pristine);
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    for (const spec of specs) {
      const packageName = spec.replace(/(.)@.*$/, '$1');
      delete manifest.dependencies?.[packageName];
      delete manifest.devDependencies?.[packageName];
    }
    writeFileSync(join(pristine, 'package.json'), JSON.stringify(manifest, null, 2));
    cpSync(join(dir, 'package-lock.json'), join(pristine, 'package-lock.json'));
    cpSync(join(dir, 'nestjs-redis-tasks.tgz'), join(pristine, 'nestjs-redis-tasks.tgz'));
    const packages = specs.map((spec) => (spec === 'nestjs-redis-tasks' ? './nestjs-redis-tasks.tgz' : spec));
    sh('npm', ['install', '--dry-run', '--no-audit', '--no-fund', ...packages], pristine);
    rmSync(pristine, { recursive: true, force: true });
    checked++;
  }
  if (checked === 0) throw new Error(`no README install line applies to ${name} (Nest ${major})`);
  console.log(`${name}: ${checked} README install line(s) for Nest ${major} resolve`);
}

const redis = await findRedis();
try {
  const env = { ...process.env, REDIS_URL: redis.url, TASKS_PREFIX: `apps-${process.pid}`, CI: process.env.CI ?? '' };
  // `npm pack` builds first (prepack); the tarball is what a user installs.
  rmSync(join(root, '.pack'), { recursive: true, force: true });
  mkdirSync(join(root, '.pack'));
  const packed = sh('npm', ['pack', '--pack-destination', '.pack'], root).stdout.trim().split('\n').pop();
  const tarball = join(root, '.pack', packed);
  for (const name of readdirSync(join(root, 'test/apps'))) {
    if (only.length > 0 && !only.includes(name)) continue;
    const source = join(root, 'test/apps', name);
    const dir = join(root, '.apps', name);
    rmSync(dir, { recursive: true, force: true });
    cpSync(source, dir, {
      recursive: true,
      filter: (path) => !/\/(node_modules|dist)(\/|$)|\.tgz$|\.tsbuildinfo$/.test(path),
    });
    cpSync(tarball, join(dir, 'nestjs-redis-tasks.tgz'));
    forgetTarballIntegrity(join(dir, 'package-lock.json'));
    console.log(`== ${name}`);
    sh('npm', ['install', '--no-audit', '--no-fund'], dir, env);
    readmeInstallLines(dir, name);
    sh('npm', ['test'], dir, env, 300_000);
    const { output: e2e } = sh(
      'npm',
      ['run', 'test:e2e', ...(name.includes('cjs') ? ['--', '--detectOpenHandles'] : [])],
      dir,
      env,
      300_000,
    );
    if (/open handle|did not exit/i.test(e2e)) throw new Error(`${name}: the e2e run left open handles:\n${e2e}`);
    await starterE2eWithRedisDown(dir, name, env);
    sh('npm', ['run', 'build'], dir, env);
    await servesOneRequest(dir, env);
    await servesWhileRedisIsDown(dir, env);
  }
  console.log('starter apps: all passed');
} finally {
  await redis.stop();
}
