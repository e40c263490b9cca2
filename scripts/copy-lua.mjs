// Copies the Lua scripts next to the compiled core: node scripts/copy-lua.mjs <dir holding core/>.
import { cpSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const target = process.argv[2];
if (!target) {
  console.error('usage: node scripts/copy-lua.mjs <output dir that holds core/>');
  process.exit(2);
}
const destination = join(target, 'core', 'scripts');
mkdirSync(destination, { recursive: true });
cpSync(new URL('../lib/core/scripts/', import.meta.url), destination, {
  recursive: true,
  // Folders (scripts/include holds helpers) and .lua files only.
  filter: (source) => source.endsWith('.lua') || statSync(source).isDirectory(),
});
