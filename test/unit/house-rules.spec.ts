import { join, resolve } from 'node:path';
import { describe, it } from '@jest/globals';
import { RuleTester } from 'eslint';
import tsParser from '@typescript-eslint/parser';
import house from '../../scripts/eslint/house-rules.mjs';

/**
 * The house rules (scripts/eslint/house-rules.mjs), each shown catching what it is for and letting pass
 * what it must: `npm run lint` applies them to their folders (eslint.config.js).
 */
RuleTester.describe = describe;
RuleTester.it = it;
RuleTester.itOnly = it.only;

const tester = new RuleTester({ languageOptions: { parser: tsParser, ecmaVersion: 'latest', sourceType: 'module' } });
const core = resolve('lib/core');
const at = (path: string) => join(core, path);

tester.run('house/imports-downward', house.rules['imports-downward'], {
  valid: [
    { filename: at('worker/runner.ts'), code: "import { decide } from '../model/retry-policy.js';" },
    { filename: at('worker/runner.ts'), code: "import { ClaimLoop } from './claim-loop.js';" },
    { filename: at('redis/gateway.ts'), code: "export { encode } from '../model/codec.js';" },
    { filename: at('worker/runtime.ts'), code: "import { TaskReaper } from '../reaper/reaper.js';" },
    { filename: at('model/codec.ts'), code: "import { Redis } from 'ioredis';" },
    { filename: resolve('lib/nest/redis-task.client.ts'), code: "import { Logger } from '@nestjs/common';" },
  ],
  invalid: [
    {
      filename: at('model/codec.ts'),
      code: "import { QueueKeys } from '../redis/keys.js';",
      errors: [{ messageId: 'upward' }],
    },
    {
      filename: at('worker/runner.ts'),
      code: "import { TaskAdmin } from '../admin/admin.js';",
      errors: [{ messageId: 'upward' }],
    },
    {
      filename: at('producer/producer.ts'),
      code: "export * from '../worker/worker.js';",
      errors: [{ messageId: 'upward' }],
    },
    {
      filename: at('worker/runner.ts'),
      code: "import { RedisTaskContext } from '../../nest/redis-task.context.js';",
      errors: [{ messageId: 'outside' }],
    },
    {
      filename: at('admin/admin.ts'),
      code: "import { Injectable } from '@nestjs/common';",
      errors: [{ messageId: 'nest' }],
    },
  ],
});

tester.run('house/adapters-above-redis', house.rules['adapters-above-redis'], {
  valid: [
    {
      filename: resolve('lib/nest/redis-task.client.ts'),
      code: "import { ProducerRuntime } from '../core/producer/producer-runtime.js';",
    },
    { filename: resolve('lib/cli/main.ts'), code: "import { TaskAdmin } from '../core/admin/admin.js';" },
    { filename: resolve('lib/nest/redis-task.client.ts'), code: "import { Redis } from 'ioredis';" },
  ],
  invalid: [
    {
      filename: resolve('lib/nest/redis-task.client.ts'),
      code: "import { PrefixKeys } from '../core/redis/keys.js';",
      errors: [{ messageId: 'redis' }],
    },
    {
      filename: resolve('lib/nest/dashboard/dashboard.service.ts'),
      code: "import type { TaskRedis } from '../../core/redis/scripts.js';",
      errors: [{ messageId: 'redis' }],
    },
    {
      filename: resolve('lib/cli/main.ts'),
      code: "export { defineScripts } from '../core/redis/scripts.js';",
      errors: [{ messageId: 'redis' }],
    },
  ],
});

tester.run('house/registries-in-store', house.rules['registries-in-store'], {
  valid: [
    {
      filename: at('admin/dead-letters.ts'),
      code: 'const moved = await this.store.gateway.requeueDeadLetters(keys, letters);',
    },
    { filename: at('redis/store.ts'), code: 'this.gateway = gatewayOf(redis);' },
    { filename: at('worker/worker-connection.ts'), code: 'const watch = watchOf(redis, server);' },
  ],
  invalid: [
    {
      filename: at('admin/dead-letters.ts'),
      code: 'const moved = await gatewayOf(this.redis).requeueDeadLetters(keys, letters);',
      errors: [{ messageId: 'registry' }],
    },
    {
      filename: at('schedules/ticker.ts'),
      code: 'const watch = watchOf(store.redis);',
      errors: [{ messageId: 'registry' }],
    },
    {
      filename: at('batches/batch-folder.ts'),
      code: 'const registry = perConnection((redis) => new Thing(redis));',
      errors: [{ messageId: 'registry' }],
    },
  ],
});

tester.run('house/no-spread-then-fields', house.rules['no-spread-then-fields'], {
  valid: [
    { code: 'const a = { b: 1, ...c };' },
    { code: 'const a = { ...c };' },
    { code: 'const a = { ...c, ...d };' },
    { code: '// spread-ok: once per worker\nconst a = { ...c, b: 1 };' },
    { code: 'const a = { ...c, b: 1 }; // spread-ok: rare path' },
  ],
  invalid: [
    { code: 'const a = { ...c, b: 1 };', errors: [{ messageId: 'spread' }] },
    { code: 'f({\n  ...options,\n  connection,\n});', errors: [{ messageId: 'spread' }] },
  ],
});

tester.run('house/no-long-lived-tables', house.rules['no-long-lived-tables'], {
  valid: [
    { code: 'class A {\n  // table-ok: one entry per queue\n  private readonly known = new Map<string, number>();\n}' },
    { code: 'class A {\n  private readonly runs = new SlotSet<number>();\n}' },
    { code: 'function f() { const seen = new Set<string>(); return seen; }' },
    { code: 'controller.abort();' },
  ],
  invalid: [
    { code: 'class A {\n  private readonly byToken = new Map<string, number>();\n}', errors: [{ messageId: 'field' }] },
    { code: 'class A {\n  static cache = new Set();\n}', errors: [{ messageId: 'field' }] },
    { code: 'table.clear();', errors: [{ messageId: 'clear' }] },
  ],
});
