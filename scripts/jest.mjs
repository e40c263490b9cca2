// Runs Jest in native ESM mode (Nest 12 is ESM-only), passing through any arguments.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);
// The Lua scripts are embedded into a generated module that ts-jest compiles with the rest.
const embedded = spawnSync(process.execPath, ['scripts/embed-lua.mjs'], { stdio: 'inherit' });
if (embedded.status !== 0) process.exit(embedded.status ?? 1);
// jest's package exports do not include its bin script; locate it through package.json instead.
const jest = join(dirname(require.resolve('jest/package.json')), 'bin', 'jest.js');
const result = spawnSync(
  process.execPath,
  ['--experimental-vm-modules', '--no-warnings=ExperimentalWarning', jest, ...process.argv.slice(2)],
  {
    stdio: 'inherit',
  },
);
process.exit(result.status ?? 1);
