// Runs the e2e suite against Nest 11 (CommonJS) as well as the Nest 12 the repository develops with:
// installs @nestjs/{common,core,microservices,testing}@11 into .nest11/ and maps every import of them
// (the library's, the tests', and Nest's own internal requires) there. Called by .ci/run; by hand:
// `node scripts/test-nest11.mjs [jest args]`.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';

const root = resolve(dirname(new URL(import.meta.url).pathname), '..');
const dir = join(root, '.nest11');
const wanted = {
  '@nestjs/common': '^11.1.0',
  '@nestjs/core': '^11.1.0',
  '@nestjs/microservices': '^11.1.0',
  '@nestjs/testing': '^11.1.0',
};
mkdirSync(dir, { recursive: true });
const manifest = join(dir, 'package.json');
const desired = JSON.stringify({ name: 'nest11-compat', private: true, dependencies: wanted }, null, 2);
if (
  !existsSync(manifest) ||
  readFileSync(manifest, 'utf8') !== desired ||
  !existsSync(join(dir, 'node_modules/@nestjs/core'))
) {
  writeFileSync(manifest, desired);
  console.log('== installing Nest 11 into .nest11/');
  // Only Nest itself: its peers (rxjs, reflect-metadata) resolve to the repository's own copies.
  const install = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--legacy-peer-deps', '--omit=peer'], {
    cwd: dir,
    stdio: 'inherit',
  });
  if (install.status !== 0) process.exit(install.status ?? 1);
}
spawnSync(process.execPath, ['scripts/embed-lua.mjs'], { cwd: root, stdio: 'inherit' });
const version = JSON.parse(readFileSync(join(dir, 'node_modules/@nestjs/core/package.json'), 'utf8')).version;
console.log(`== e2e suite against @nestjs/core ${version}`);
const require = createRequire(import.meta.url);
const jest = join(dirname(require.resolve('jest/package.json')), 'bin', 'jest.js');
const result = spawnSync(
  process.execPath,
  [
    '--experimental-vm-modules',
    '--no-warnings=ExperimentalWarning',
    jest,
    '--config',
    'jest.nest11.config.mjs',
    ...process.argv.slice(2),
  ],
  { cwd: root, stdio: 'inherit', env: { ...process.env, NEST_MAJOR: '11' } },
);
process.exit(result.status ?? 1);
