// The rule source (legacy format). ESLint 10 reads only flat config: eslint.config.js loads this
// file through FlatCompat.
export default {
  root: true,
  parser: '@typescript-eslint/parser',
  parserOptions: { sourceType: 'module', ecmaVersion: 'latest' },
  plugins: ['@typescript-eslint'],
  extends: ['eslint:recommended', 'plugin:@typescript-eslint/recommended'],
  env: { node: true, es2022: true },
  rules: {
    '@typescript-eslint/no-explicit-any': 'error',
    '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    '@typescript-eslint/consistent-type-imports': [
      'error',
      { fixStyle: 'inline-type-imports', disallowTypeAnnotations: false },
    ],
    'no-console': 'error',
    eqeqeq: ['error', 'always'],
    'prefer-const': 'error',
  },
  overrides: [
    {
      // Nest resolves constructor parameters from their emitted types: a type-only import would
      // erase the class a decorator's metadata needs.
      files: ['lib/nest/**/*.ts', 'sample/**/*.ts', 'test/**/*.ts'],
      rules: { '@typescript-eslint/consistent-type-imports': 'off' },
    },
    {
      files: ['scripts/**/*.mjs', 'sample/**/*.ts', 'test/support/*.mjs', 'test/chaos/**/*.ts', 'bench/**/*.ts'],
      rules: { 'no-console': 'off' },
    },
  ],
};
