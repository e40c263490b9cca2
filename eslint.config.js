import js from '@eslint/js';
import { FlatCompat } from '@eslint/eslintrc';
import legacy from './.eslintrc.js';

const compat = new FlatCompat({ baseDirectory: import.meta.dirname, recommendedConfig: js.configs.recommended });

export default [
  { ignores: ['dist/**', '.sample-build/**', '.chaos-build/**', 'build/**', 'node_modules/**', 'coverage/**', 'lib/core/redis/scripts/sources.generated.ts', 'lib/core/support/version.generated.ts', 'test/apps/**', '.apps/**', '.pack/**', '.readme-snippets/**'] },
  ...compat.config(legacy),
];
