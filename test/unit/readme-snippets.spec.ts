import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import ts from 'typescript';

/**
 * Every ```ts block of the README compiles as written (against this repository's Nest and the package's
 * own sources). A block's free names (your own DTOs, modules and objects) are declared around it, and its
 * statements run inside an async function (top-level await); its own imports are kept as they are.
 */
const root = process.cwd();
const dir = join(root, '.readme-snippets');
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const allBlocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1]);
/**
 * A block whose first line names a file (`// src/tasks/tasks.module.ts`) is a complete file: it is compiled
 * as written, with nothing declared around it, in a copy of the Nest 11 starter app (test/apps/nest11-cjs).
 * Where the starter has that file, the README's copy must be the same text (and the Nest 12 starter's the
 * same but for its `.js` import endings): the app CI builds, tests and serves is the README's.
 */
const FILE_HEADER = /^\/\/ (src\/[\w./-]+\.ts)(?: .*)?\n/;
const files = allBlocks
  .filter((block) => FILE_HEADER.test(block))
  .map((block) => ({ path: (FILE_HEADER.exec(block) as RegExpExecArray)[1], text: block.replace(FILE_HEADER, '') }));
const blocks = allBlocks.filter((block) => !FILE_HEADER.test(block));

/** What a snippet may use without importing it: Nest and rxjs names, and the package's own. */
const IMPORTS: Record<string, string> = {
  Module: '@nestjs/common',
  Controller: '@nestjs/common',
  Injectable: '@nestjs/common',
  Get: '@nestjs/common',
  NestFactory: '@nestjs/core',
  EventPattern: '@nestjs/microservices',
  MessagePattern: '@nestjs/microservices',
  Payload: '@nestjs/microservices',
  Ctx: '@nestjs/microservices',
  ClientsModule: '@nestjs/microservices',
  firstValueFrom: 'rxjs',
  lastValueFrom: 'rxjs',
  RedisTaskReceipt: 'nestjs-redis-tasks',
  BatchSummary: 'nestjs-redis-tasks',
  FlowParentResult: 'nestjs-redis-tasks',
  TerminusModule: '@nestjs/terminus',
  HealthCheck: '@nestjs/terminus',
  HealthCheckService: '@nestjs/terminus',
  RedisTaskModule: 'nestjs-redis-tasks',
  RedisTaskTransport: 'nestjs-redis-tasks',
  RedisTaskClient: 'nestjs-redis-tasks',
  RedisTaskContext: 'nestjs-redis-tasks',
  RedisTaskRecordBuilder: 'nestjs-redis-tasks',
  RedisTaskAdmin: 'nestjs-redis-tasks',
  RedisTaskReaper: 'nestjs-redis-tasks',
  TaskSchedule: 'nestjs-redis-tasks',
  expect: '@jest/globals',
  describe: '@jest/globals',
  it: '@jest/globals',
  beforeAll: '@jest/globals',
  afterAll: '@jest/globals',
};
/** Your own names, as the README assumes them. */
const DECLARED: Record<string, string> = {
  ResizeDto: 'declare class ResizeDto { size: number }',
  RenderDto: 'declare class RenderDto { number: string }',
  UserDto: 'declare class UserDto { id: number }',
  WorkerModule: 'declare class WorkerModule {}',
  AppModule: 'declare class AppModule {}',
  DatabaseModule: 'declare class DatabaseModule {}',
  AdminGuard: 'declare class AdminGuard { canActivate(): boolean }',
  BillingModule: 'declare class BillingModule {}',
  EmailModule: 'declare class EmailModule {}',
  AvatarsController: 'declare class AvatarsController {}',
  AvatarService: 'declare class AvatarService {}',
  MailController: 'declare class MailController {}',
  MailService: 'declare class MailService {}',
  ReportsService: 'declare class ReportsService { build(kind: string): Promise<void> }',
  SmtpGateway: 'declare class SmtpGateway {}',
  fakeSmtp: 'declare const fakeSmtp: { sent: unknown[] }',
  user: 'declare const user: UserDto',
  tasks: "declare const tasks: import('nestjs-redis-tasks').RedisTaskClient",
  admin: "declare const admin: import('nestjs-redis-tasks').RedisTaskAdmin",
  reaper: "declare const reaper: import('nestjs-redis-tasks').RedisTaskReaper",
  transport: "declare const transport: import('nestjs-redis-tasks').RedisTaskTransport",
  app: "declare const app: import('@nestjs/common').INestApplication",
  redis: "declare const redis: import('ioredis').Redis",
  createMicroservice: 'declare const createMicroservice: (module: unknown, options: object) => unknown',
  host: 'declare const host: string',
  port: 'declare const port: number',
  nodes: 'declare const nodes: { host: string; port: number }[]',
  password: 'declare const password: string',
  EncoderService: 'declare class EncoderService { step(videoId: string): Promise<void> }',
  PreviewService:
    'declare class PreviewService { pages(draftId: string): Promise<string[]>; render(page: string, signal: AbortSignal): Promise<void> }',
  Payments:
    'declare class Payments { charge(orderId: string, options: { idempotencyKey: string }): Promise<{ chargeId: string }> }',
  Catalog:
    'declare class Catalog { page(cursor: number): Promise<{ items: string[]; next?: number }>; index(item: string): Promise<void> }',
  videoId: 'declare const videoId: string',
  userId: 'declare const userId: number',
  file: 'declare const file: string',
  query: 'declare const query: string',
  draftId: 'declare const draftId: string',
  albumId: 'declare const albumId: number',
  orderId: 'declare const orderId: string',
  photos: 'declare const photos: { name: string }[]',
  client: "declare const client: import('nestjs-redis-tasks').RedisTaskClient",
  bar: 'declare const bar: { update(progress: unknown): void }',
};

function module(snippet: string): string {
  const lines = snippet.split('\n');
  const imports = lines.filter((line) => line.startsWith('import '));
  // `export` belongs to a file's top level; inside the wrapping function it is dropped.
  const body = lines
    .filter((line) => !line.startsWith('import '))
    .map((line) => line.replace(/^export /, ''))
    .join('\n');
  const imported = new Set(
    imports.flatMap(
      (line) =>
        /\{([^}]*)\}/
          .exec(line)?.[1]
          .split(',')
          .map((name) => name.trim()) ?? [],
    ),
  );
  const uses = (name: string) => new RegExp(`\\b${name}\\b`).test(body);
  const byModule = new Map<string, string[]>();
  for (const [name, from] of Object.entries(IMPORTS)) {
    if (imported.has(name) || !uses(name)) continue;
    byModule.set(from, [...(byModule.get(from) ?? []), name]);
  }
  const declared = Object.entries(DECLARED).filter(
    ([name]) => uses(name) && !new RegExp(`(class|const|let) ${name}\\b`).test(body),
  );
  return [
    ...imports,
    ...[...byModule].map(([from, names]) => `import { ${names.join(', ')} } from '${from}';`),
    ...declared.map(([, declaration]) => declaration),
    'export async function snippet(): Promise<void> {',
    body,
    '}',
  ].join('\n');
}

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('README TypeScript snippets', () => {
  it('finds them', () => {
    expect(blocks.length).toBeGreaterThan(10);
  });

  // Under scripts/test-nest11.mjs (NEST_MAJOR=11) Nest's packages resolve to Nest 11, so the same blocks
  // are checked against both majors.
  const nest11 = process.env.NEST_MAJOR === '11';
  const nestPaths = nest11
    ? Object.fromEntries(
        ['common', 'core', 'microservices', 'testing'].map((name) => [
          `@nestjs/${name}`,
          [`./.nest11/node_modules/@nestjs/${name}`],
        ]),
      )
    : {};

  /** The compiler options of a starter app's own tsconfig.json (what a user's `nest build` uses). */
  function starterOptions(app: string): ts.CompilerOptions {
    const path = join(root, 'test/apps', app, 'tsconfig.json');
    const { config } = ts.readConfigFile(path, (file) => readFileSync(file, 'utf8'));
    const { options } = ts.parseJsonConfigFileContent(config, ts.sys, join(root, 'test/apps', app));
    // Checking only: nothing emitted, and the test runner's globals are not installed here.
    for (const emitting of [
      'declaration',
      'incremental',
      'sourceMap',
      'outDir',
      'rootDir',
      'baseUrl',
      'tsBuildInfoFile',
    ])
      delete options[emitting];
    return { ...options, types: ['node'] };
  }

  const settings: [string, ts.CompilerOptions][] = [
    [
      'strict',
      {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        strict: true,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        skipLibCheck: true,
        types: ['node'],
      },
    ],
    // isolatedModules with emitDecoratorMetadata: a type in a decorated signature must be `import type` (TS1272).
    ["the Nest 11 starter's tsconfig", starterOptions('nest11-cjs')],
    ["the Nest 12 starter's tsconfig", starterOptions('nest12-esm')],
  ];

  it.each(settings)(
    `compile as written (Nest ${nest11 ? 11 : 12}, %s)`,
    (name, options) => {
      const sub = join(dir, name.replace(/\W+/g, '-'));
      rmSync(sub, { recursive: true, force: true });
      mkdirSync(sub, { recursive: true });
      const files = blocks.map((block, i) => {
        const file = join(sub, `snippet-${i}.ts`);
        writeFileSync(file, module(block));
        return file;
      });
      const program = ts.createProgram(files, {
        ...options,
        noEmit: true,
        paths: { 'nestjs-redis-tasks': ['./lib/index.ts'], 'nestjs-redis-tasks/*': ['./lib/*.ts'], ...nestPaths },
      });
      const problems = ts
        .getPreEmitDiagnostics(program)
        .filter((diagnostic) => diagnostic.file?.fileName.startsWith(sub))
        .map((diagnostic) => {
          const where =
            diagnostic.file && diagnostic.start !== undefined
              ? diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start)
              : undefined;
          return `${diagnostic.file?.fileName.slice(sub.length + 1)}:${(where?.line ?? 0) + 1} ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
        });
      expect(problems).toEqual([]);
    },
    120_000,
  );

  it("holds the complete first app: the starter apps' own files, word for word", () => {
    const paths = files.map((file) => file.path);
    expect(paths).toEqual(
      expect.arrayContaining([
        'src/main.ts',
        'src/app.module.ts',
        'src/tasks/tasks.module.ts',
        'src/tasks/avatars.controller.ts',
      ]),
    );
    expect(new Set(paths).size).toBe(paths.length);
    for (const file of files) {
      const starter = join(root, 'test/apps/nest11-cjs', file.path);
      if (!existsSync(starter)) continue;
      expect({ path: file.path, text: file.text }).toEqual({ path: file.path, text: readFileSync(starter, 'utf8') });
      // The ESM starter: relative imports end in .js, and its main.ts awaits bootstrap() at the top level.
      const esm = readFileSync(join(root, 'test/apps/nest12-esm', file.path), 'utf8')
        .replace(/(from '\.{1,2}\/[^']*)\.js'/g, "$1'")
        .replace(/^await bootstrap\(\);$/m, 'bootstrap();');
      expect({ path: file.path, esm }).toEqual({ path: file.path, esm: file.text });
    }
  });

  it('compiles its complete files as written, in a copy of the Nest 11 starter (strict, nothing declared for them)', () => {
    const app = join(dir, 'app');
    rmSync(app, { recursive: true, force: true });
    cpSync(join(root, 'test/apps/nest11-cjs/src'), join(app, 'src'), {
      recursive: true,
      filter: (path) => !path.endsWith('.spec.ts'),
    });
    for (const file of files) {
      mkdirSync(dirname(join(app, file.path)), { recursive: true });
      writeFileSync(join(app, file.path), file.text);
    }
    const sources = readdirSync(join(app, 'src'), { recursive: true, encoding: 'utf8' })
      .filter((path) => path.endsWith('.ts'))
      .map((path) => join(app, 'src', path));
    const program = ts.createProgram(sources, {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.CommonJS,
      moduleResolution: ts.ModuleResolutionKind.Node10,
      strict: true,
      declaration: true, // as the starters: every inferred type of a public signature must be nameable
      emitDeclarationOnly: true,
      outDir: join(app, 'out'),
      experimentalDecorators: true,
      emitDecoratorMetadata: true,
      skipLibCheck: true,
      types: ['node'],
      baseUrl: root,
      paths: { 'nestjs-redis-tasks': ['./lib/index.ts'], 'nestjs-redis-tasks/*': ['./lib/*.ts'] },
    });
    const emitted = program.emit();
    const problems = [...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics]
      .filter((diagnostic) => diagnostic.file?.fileName.startsWith(app))
      .map((diagnostic) => {
        const where =
          diagnostic.file && diagnostic.start !== undefined
            ? diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start)
            : undefined;
        return `${diagnostic.file?.fileName.slice(app.length + 1)}:${(where?.line ?? 0) + 1} ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
      });
    expect(problems).toEqual([]);
  }, 120_000);
});
