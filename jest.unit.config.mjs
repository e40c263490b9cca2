// `npm run test:unit`: the tests of one part at a time, with no Redis and no Nest app (seconds). The whole
// suite (`npm test`, jest.config.mjs) runs them too, with everything else, against a real Redis.
import base from './jest.config.mjs';

const { globalSetup: _setup, globalTeardown: _teardown, ...rest } = base;

export default {
  ...rest,
  testMatch: ['<rootDir>/test/unit/**/*.spec.ts'],
  maxWorkers: 2,
};
