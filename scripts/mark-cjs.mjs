// Marks the CommonJS build as CommonJS (the package itself is "type": "module"): node scripts/mark-cjs.mjs dist/cjs
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node scripts/mark-cjs.mjs <CommonJS output dir>');
  process.exit(2);
}
writeFileSync(join(dir, 'package.json'), `${JSON.stringify({ type: 'commonjs' }, null, 2)}\n`);
