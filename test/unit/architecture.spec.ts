import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { scriptDefinitions } from '../../lib/core/redis/scripts.js';

const LIB = resolve('lib');
/** "About 250": the largest today, ClaimLoop and TaskProducer, are within a few lines of it. */
const MAX_CLASS_LINES = 275;
const CORE = join(LIB, 'core');
/** The folders whose code runs for every task (the per-task rules below apply to them). */
const PER_TASK = [join(CORE, 'worker'), join(CORE, 'producer'), join(CORE, 'model'), join(CORE, 'redis'), join(LIB, 'nest')];

/**
 * The layers of the core, lowest first: a file may import its own folder and the folders of lower
 * layers, never a higher one nor a sibling of the same layer (the roles on top stay independent).
 */
const LAYERS: Record<string, number> = { model: 0, support: 1, redis: 2, config: 3, producer: 4, worker: 4, reaper: 4, admin: 4 };
/** The one sideways edge: a worker process's composition root runs a reaper schedule for its own patterns. */
const ALLOWED_SIDEWAYS: Record<string, string> = { 'worker/runtime.ts': 'reaper' };

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.generated.ts') ? [path] : [];
  });
}

function relativeImports(file: string): string[] {
  const source = readFileSync(file, 'utf8');
  return [...source.matchAll(/from '(\.[^']+)'/g)].map((match) => resolve(dirname(file), match[1]));
}

describe('architecture', () => {
  it('keeps every core file in a role folder', () => {
    const loose = readdirSync(CORE).filter((name) => !statSync(join(CORE, name)).isDirectory());
    expect(loose).toEqual([]);
    expect(readdirSync(CORE).sort()).toEqual(Object.keys(LAYERS).sort());
  });

  it('has the core import downwards only: model <- support <- redis <- config <- producer, worker, reaper, admin', () => {
    const wrong: string[] = [];
    for (const file of sourceFiles(CORE)) {
      const layer = relative(CORE, file).split('/')[0];
      for (const target of relativeImports(file)) {
        const into = relative(CORE, target);
        if (into.startsWith('..')) {
          wrong.push(`${relative(LIB, file)} imports ${relative(LIB, target)} (outside the core)`);
          continue;
        }
        const targetLayer = into.split('/')[0];
        const sideways = ALLOWED_SIDEWAYS[relative(CORE, file)] === targetLayer;
        if (targetLayer !== layer && !(LAYERS[targetLayer] < LAYERS[layer]) && !sideways) wrong.push(`${relative(LIB, file)} imports ${into}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('keeps the core free of Nest', () => {
    const withNest = sourceFiles(CORE).filter((file) => /from '@nestjs\//.test(readFileSync(file, 'utf8')));
    expect(withNest.map((file) => relative(LIB, file))).toEqual([]);
  });

  it('calls the Lua scripts only through the gateway (nobody else knows a script KEYS order)', () => {
    const names = scriptDefinitions().map((script) => script.name);
    // A script command called on a connection (`redis.`, `this.redis.`, `scripts.`, a pipeline), not a
    // gateway or admin method of the same name.
    const call = new RegExp(`(?:redis|Redis|scripts|pipeline|as TaskRedis\\))\\.(${names.join('|')})\\(`);
    const gatewayFolder = join(CORE, 'redis');
    const callers = sourceFiles(LIB)
      .filter((file) => !file.startsWith(gatewayFolder + '/'))
      .filter((file) => call.test(readFileSync(file, 'utf8')));
    expect(callers.map((file) => relative(LIB, file))).toEqual([]);
    const insideRedis = sourceFiles(gatewayFolder).filter((file) => !file.endsWith('gateway.ts') && !file.endsWith('scripts.ts'));
    expect(insideRedis.filter((file) => call.test(readFileSync(file, 'utf8'))).map((file) => relative(LIB, file))).toEqual([]);
  });

  it('keeps every class small enough to read in one sitting (about 250 lines)', () => {
    const large: string[] = [];
    for (const file of sourceFiles(LIB)) {
      const lines = readFileSync(file, 'utf8').split('\n');
      let start = -1;
      let name = '';
      lines.forEach((line, index) => {
        const opened = /^(?:export )?(?:abstract )?class (\w+)/.exec(line);
        if (opened) {
          start = index;
          name = opened[1];
        } else if (start >= 0 && line === '}') {
          if (index - start > MAX_CLASS_LINES) large.push(`${relative(LIB, file)}: ${name} (${index - start} lines)`);
          start = -1;
        }
      });
    }
    expect(large).toEqual([]);
  });

  it('builds no object as a spread followed by more fields on the per-task paths (V8 takes its slow path: ~1 µs each)', () => {
    // `{ ...a, b }` cost ~0.9 µs in Node 20 (`{ ...a }` and `{ b, ...a }` ~0.02): one in the runner was a
    // tenth of a worker's CPU per task. Where one runs once per worker or only on a rare path, a
    // `// spread-ok: why` comment on the line before says so.
    const leading = /\{\s*\.\.\.[^,{}]+,\s*[\w'"[]/;
    const found: string[] = [];
    for (const file of PER_TASK.flatMap((dir) => sourceFiles(dir))) {
      const lines = readFileSync(file, 'utf8').split('\n');
      lines.forEach((line, index) => {
        const opensWithSpread = /\{\s*$/.test(lines[index - 1] ?? '') && /^\s*\.\.\.[\w.]+,\s*$/.test(line);
        const allowed = line.includes('spread-ok') || (lines[index - 1] ?? '').includes('// spread-ok');
        if ((leading.test(line) || opensWithSpread) && !allowed && !/^\s*(\/\/|\*)/.test(line)) {
          found.push(`${relative(LIB, file)}:${index + 1}`);
        }
      });
    }
    expect(found).toEqual([]);
  });

  it('keeps no long-lived Map or Set on the per-task paths, nor clears one (see churn-tables.ts)', () => {
    // A Map or Set that gains and loses an entry per task rehashes into new tables that V8 links to their
    // successors; once one was promoted, every later table and what it held outlived scavenges (1.6 KB
    // promoted per task, see the memory spec). Per-task entries go in a SlotSet or an IdTable; a table
    // that changes per queue or per connection says so in a `// table-ok: why` comment on the line before.
    const field = /^\s+(?:private |protected |public |static |readonly )+\w+\s*=\s*new (?:Map|Set)\b/;
    const found: string[] = [];
    // The dashboard's page script runs in the browser, not on a per-task path.
    for (const file of PER_TASK.flatMap((dir) => sourceFiles(dir)).filter((file) => !file.includes(`${sep}dashboard${sep}`))) {
      const lines = readFileSync(file, 'utf8').split('\n');
      lines.forEach((line, index) => {
        const allowed = (lines[index - 1] ?? '').includes('// table-ok:');
        const code = /^\s*(\/\/|\*|\/\*)/.test(line) ? '' : line.replace(/\/\/.*$/, '');
        if ((field.test(code) && !allowed) || /\.clear\(\)/.test(code)) found.push(`${relative(LIB, file)}:${index + 1}`);
      });
    }
    expect(found).toEqual([]);
  });
});
