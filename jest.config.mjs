/** Jest in native ESM mode: Nest 12 ships only ESM. Tests talk to a real Redis (see test/support). */
export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: 'tsconfig.json' }] },
  testMatch: ['<rootDir>/test/**/*.spec.ts'],
  // The starter apps run their own runners (scripts/test-apps.mjs), from fresh copies under .apps/.
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/apps/'],
  modulePathIgnorePatterns: ['<rootDir>/.apps/', '<rootDir>/.pack/', '<rootDir>/test/apps/'],
  globalSetup: '<rootDir>/test/support/global-setup.mjs',
  globalTeardown: '<rootDir>/test/support/global-teardown.mjs',
  testTimeout: 60_000,
  // One test file at a time: the chaos suite runs several worker processes and the machine has 2 cores;
  // files competing for them would make leases and timings depend on what else happens to run.
  maxWorkers: 1,
};
