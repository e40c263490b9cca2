// Runs Jest in native ESM mode (Nest 12 is ESM-only), passing through any arguments.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);
// jest's package exports do not include its bin script; locate it through package.json instead.
const jest = join(dirname(require.resolve('jest/package.json')), 'bin', 'jest.js');
const result = spawnSync(process.execPath, ['--experimental-vm-modules', '--no-warnings=ExperimentalWarning', jest, ...process.argv.slice(2)], {
  stdio: 'inherit',
});
process.exit(result.status ?? 1);
