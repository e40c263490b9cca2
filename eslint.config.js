// The one config ESLint reads (ESLint 10 reads flat config only). The general rules stay in .eslintrc.js
// (legacy format, loaded here through FlatCompat); the type-aware rules and the house rules are here.
import js from '@eslint/js';
import { FlatCompat } from '@eslint/eslintrc';
import legacy from './.eslintrc.js';
import house from './scripts/eslint/house-rules.mjs';

const compat = new FlatCompat({ baseDirectory: import.meta.dirname, recommendedConfig: js.configs.recommended });

/** The folders whose code runs for every task: the per-task rules apply to them (ARCHITECTURE.md). */
const PER_TASK = [
  'lib/core/worker/**/*.ts',
  'lib/core/producer/**/*.ts',
  'lib/core/model/**/*.ts',
  'lib/core/redis/**/*.ts',
  'lib/nest/**/*.ts',
];

export default [
  {
    ignores: [
      'dist/**',
      '.sample-build/**',
      '.chaos-build/**',
      '.bench-build/**',
      'build/**',
      'node_modules/**',
      'coverage/**',
      'lib/core/redis/scripts/sources.generated.ts',
      'lib/core/support/version.generated.ts',
      'test/apps/**',
      '.apps/**',
      '.pack/**',
      '.readme-snippets/**',
      '.nest11/**',
    ],
  },
  ...compat.config(legacy),
  {
    // Promises nobody awaits or handles end a process on rejection: the type-aware rules find them.
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
    },
  },
  {
    files: ['lib/core/**/*.ts'],
    plugins: { house },
    rules: { 'house/imports-downward': 'error', 'house/registries-in-store': 'error' },
  },
  {
    // The adapters reach Redis through the core's roles (entry points like lib/index.ts re-export freely).
    files: ['lib/nest/**/*.ts', 'lib/cli/**/*.ts'],
    plugins: { house },
    rules: { 'house/adapters-above-redis': 'error' },
  },
  {
    files: PER_TASK,
    ignores: ['**/*.generated.ts'],
    plugins: { house },
    rules: { 'house/no-spread-then-fields': 'error', 'house/no-long-lived-tables': 'error' },
  },
  {
    // The dashboard's page script runs in the browser, not on a per-task path.
    files: ['lib/nest/dashboard/**/*.ts'],
    rules: { 'house/no-long-lived-tables': 'off' },
  },
];
