/** The e2e suite with Nest 11 (see scripts/test-nest11.mjs): every @nestjs/{common,core,microservices,testing} import goes to .nest11/. */
import base from './jest.config.mjs';

export default {
  ...base,
  testMatch: ['<rootDir>/test/e2e/**/*.spec.ts', '<rootDir>/test/unit/readme-snippets.spec.ts'],
  moduleNameMapper: {
    '^@nestjs/(common|core|microservices|testing)$': '<rootDir>/.nest11/node_modules/@nestjs/$1',
    '^@nestjs/(common|core|microservices|testing)/(.*)$': '<rootDir>/.nest11/node_modules/@nestjs/$1/$2',
    ...base.moduleNameMapper,
  },
};
