// The house rules of this repository as ESLint rules (plugin `house`), each scoped to its folders in
// eslint.config.js. ARCHITECTURE.md ("The per-task path") says why each exists and how to measure it;
// test/unit/house-rules.spec.ts shows each one catching what it is for.
import { dirname, relative, resolve, sep } from 'node:path';

/**
 * The layers of the core, lowest first: a file may import its own folder and the folders of lower layers,
 * never a higher one nor a sibling of the same layer (the roles on top stay independent).
 */
export const LAYERS = {
  model: 0,
  support: 1,
  redis: 2,
  config: 3,
  producer: 4,
  // Recurring schedules write their ticks' tasks as the producer prepares them; the worker, the reaper
  // and the admin API run or change them.
  schedules: 5,
  // Batches count their tasks' settles and enqueue their callbacks as the producer prepares tasks; the
  // reaper folds the settles, the admin API reads them.
  batches: 5,
  // Flows release their nodes as the producer prepares tasks, and stop them through the tracked tasks'
  // fences; the reaper and the worker fold their settles, the admin API reads and cancels them.
  flows: 5,
  // The transactional outbox: rows written as the producer encodes tasks, relayed through it.
  outbox: 5,
  worker: 6,
  reaper: 6,
  admin: 6,
};
/** The one sideways edge: a worker process's composition root runs a reaper schedule for its own patterns. */
export const ALLOWED_SIDEWAYS = { 'worker/runtime.ts': 'reaper' };

/** The folder of `lib/core` a file is in, and its path inside the core (or undefined outside it). */
function coreFolder(file, coreRoot) {
  const inside = relative(coreRoot, file);
  if (inside.startsWith('..') || inside === '') return undefined;
  return { layer: inside.split(sep)[0], path: inside.split(sep).join('/') };
}

/** True when the line of `node`, or the line before it, carries `marker` in a comment. */
function marked(context, node, marker) {
  const lines = context.sourceCode.lines;
  const line = node.loc.start.line;
  return [lines[line - 1], lines[line - 2]].some((text) => text !== undefined && text.includes(marker));
}

const importsDownward = {
  meta: {
    type: 'problem',
    docs: { description: 'lib/core imports its own folder and lower layers only, never Nest' },
    schema: [{ type: 'object', properties: { coreRoot: { type: 'string' } }, additionalProperties: false }],
    messages: {
      upward:
        '{{file}} imports {{target}}: the core imports downwards only (model <- support <- redis <- config <- producer, worker, reaper, admin)',
      outside: '{{file}} imports {{target}}, outside the core: the core knows nothing of its adapters',
      nest: 'the core is Nest-agnostic: {{source}} belongs in lib/nest',
    },
  },
  create(context) {
    const coreRoot = resolve(context.options[0]?.coreRoot ?? 'lib/core');
    const file = context.filename;
    const from = coreFolder(file, coreRoot);
    if (!from) return {};
    const check = (node) => {
      const source = node.source?.value;
      if (typeof source !== 'string') return;
      if (source.startsWith('@nestjs/')) {
        context.report({ node: node.source, messageId: 'nest', data: { source } });
        return;
      }
      if (!source.startsWith('.')) return;
      const target = resolve(dirname(file), source);
      const into = coreFolder(target, coreRoot);
      if (!into) {
        context.report({
          node: node.source,
          messageId: 'outside',
          data: { file: from.path, target: relative(resolve(coreRoot, '..'), target) },
        });
        return;
      }
      const sideways = ALLOWED_SIDEWAYS[from.path] === into.layer;
      if (into.layer !== from.layer && !(LAYERS[into.layer] < LAYERS[from.layer]) && !sideways) {
        context.report({ node: node.source, messageId: 'upward', data: { file: from.path, target: into.path } });
      }
    };
    return { ImportDeclaration: check, ExportNamedDeclaration: check, ExportAllDeclaration: check };
  },
};

const adaptersAboveRedis = {
  meta: {
    type: 'problem',
    docs: {
      description: "the adapters (lib/nest, lib/cli) reach Redis through the core's roles, never lib/core/redis itself",
    },
    schema: [{ type: 'object', properties: { redisRoot: { type: 'string' } }, additionalProperties: false }],
    messages: {
      redis:
        "{{target}} is the core's Redis layer: an adapter goes through a role (producer/producer-runtime, worker/worker-connection, " +
        'admin/...) or config/options, so connections, keys and layouts are built in one place',
    },
  },
  create(context) {
    const redisRoot = resolve(context.options[0]?.redisRoot ?? 'lib/core/redis');
    const check = (node) => {
      const source = node.source?.value;
      if (typeof source !== 'string' || !source.startsWith('.')) return;
      const target = resolve(dirname(context.filename), source);
      const inside = relative(redisRoot, target);
      if (!inside.startsWith('..'))
        context.report({
          node: node.source,
          messageId: 'redis',
          data: { target: `core/redis/${inside.split(sep).join('/')}` },
        });
    };
    return { ImportDeclaration: check, ExportNamedDeclaration: check, ExportAllDeclaration: check };
  },
};

/**
 * The per-connection registries of lib/core/redis (a connection's script gateway, its watch, its scripts
 * defined): a role reaches them through its store (TaskStore: `store.gateway`, `store.watch`), never by
 * calling them. Outside lib/core/redis only the modules that own or watch a connection of their own, each
 * with why, call them.
 */
export const REGISTRIES = ['gatewayOf', 'watchOf', 'defineScripts', 'perConnection'];
export const CONNECTION_OWNERS = {
  'producer/producer-runtime.ts': "opens the client's connection (its watch names the server)",
  'producer/enqueue-coalescer.ts': "the connection's enqueue coalescer, shared by every producer on it",
  'worker/worker-connection.ts': "opens the worker's connections (their watches name the server)",
  'worker/idle-wait.ts': "the idle wait's own blocking connection (its scripts defined there)",
  'worker/watchdog.ts': "watches each claim loop's connection (when it was last ready)",
  'worker/turn-batch.ts': "per-connection batches of one event-loop turn's acknowledgements and starts",
  'admin/readiness.ts': "waits for a connection an adapter holds (a Nest provider's), before any store",
};

const registriesInStore = {
  meta: {
    type: 'problem',
    docs: { description: "lib/core reaches a connection's registries through its store (TaskStore)" },
    schema: [{ type: 'object', properties: { coreRoot: { type: 'string' } }, additionalProperties: false }],
    messages: {
      registry:
        "{{file}} calls {{name}}(): a role reaches the connection's gateway and watch through its store (store.gateway, " +
        'store.watch); only lib/core/redis and the connection owners (house-rules.mjs CONNECTION_OWNERS) call the registries',
    },
  },
  create(context) {
    const coreRoot = resolve(context.options[0]?.coreRoot ?? 'lib/core');
    const from = coreFolder(context.filename, coreRoot);
    if (!from || from.layer === 'redis' || CONNECTION_OWNERS[from.path]) return {};
    return {
      CallExpression(node) {
        const name = node.callee.type === 'Identifier' ? node.callee.name : undefined;
        if (name && REGISTRIES.includes(name))
          context.report({ node, messageId: 'registry', data: { file: from.path, name } });
      },
    };
  },
};

const noSpreadThenFields = {
  meta: {
    type: 'problem',
    docs: { description: '`{ ...a, b }` on a per-task path (V8 takes its slow path: ~1 µs each)' },
    schema: [],
    messages: {
      spread:
        'an object made as a spread followed by more fields costs ~0.9 µs in V8 (`{ b, ...a }` or `{ ...a }` ~0.02): ' +
        'build it field by field, or, where it runs once per worker or on a rare path, say so in a `// spread-ok: why` comment',
    },
  },
  create(context) {
    return {
      ObjectExpression(node) {
        const [first, ...rest] = node.properties;
        if (first?.type !== 'SpreadElement' || !rest.some((property) => property.type !== 'SpreadElement')) return;
        if (marked(context, node, 'spread-ok') || marked(context, first, 'spread-ok')) return;
        context.report({ node, messageId: 'spread' });
      },
    };
  },
};

const noLongLivedTables = {
  meta: {
    type: 'problem',
    docs: { description: 'no long-lived Map or Set field, and no .clear(), on a per-task path (see churn-tables.ts)' },
    schema: [],
    messages: {
      field:
        'a Map or Set field that gains and loses an entry per task keeps its old tables alive past scavenges (churn-tables.ts): ' +
        'use a SlotSet or an IdTable, or say why this one changes per queue or per connection in a `// table-ok: why` comment on the line before',
      clear:
        ".clear() keeps a table's old backing store reachable (churn-tables.ts): drop the table and make a new one",
    },
  },
  create(context) {
    return {
      PropertyDefinition(node) {
        const value = node.value;
        if (
          value?.type !== 'NewExpression' ||
          value.callee.type !== 'Identifier' ||
          !['Map', 'Set'].includes(value.callee.name)
        )
          return;
        const before = context.sourceCode.lines[node.loc.start.line - 2] ?? '';
        if (!before.includes('// table-ok:')) context.report({ node, messageId: 'field' });
      },
      CallExpression(node) {
        const callee = node.callee;
        if (
          callee.type === 'MemberExpression' &&
          !callee.computed &&
          callee.property.name === 'clear' &&
          node.arguments.length === 0
        ) {
          context.report({ node, messageId: 'clear' });
        }
      },
    };
  },
};

export default {
  meta: { name: 'house' },
  rules: {
    'imports-downward': importsDownward,
    'adapters-above-redis': adaptersAboveRedis,
    'registries-in-store': registriesInStore,
    'no-spread-then-fields': noSpreadThenFields,
    'no-long-lived-tables': noLongLivedTables,
  },
};
