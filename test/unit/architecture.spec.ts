import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { scriptDefinitions } from '../../lib/core/redis/scripts.js';
import { LAYERS } from '../../scripts/eslint/house-rules.mjs';

const LIB = resolve('lib');
/** Lines of a class, from its `class` line to its closing brace. */
const MAX_CLASS_LINES = 250;
/** Lines of a function or method body. */
const MAX_FUNCTION_LINES = 60;
/**
 * Functions allowed past MAX_FUNCTION_LINES, each with why: `dashboardController` is a factory whose body
 * is the controller class it makes per mount (its path and guard are decorator arguments); its methods are
 * short.
 */
const LONG_FUNCTIONS: Record<string, string> = {
  'nest/dashboard/dashboard.controller.ts:dashboardController': 'a class factory',
};
const CORE = join(LIB, 'core');

/**
 * What is checked here: the shape of the tree. The rules about what a file's code may do (import only
 * downwards, no Nest in the core, no spread-then-fields and no long-lived Map or Set on the per-task
 * paths) are lint rules (scripts/eslint/house-rules.mjs, test/unit/house-rules.spec.ts).
 */

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.generated.ts') ? [path] : [];
  });
}

describe('architecture', () => {
  it('keeps every core file in a role folder', () => {
    const loose = readdirSync(CORE).filter((name) => !statSync(join(CORE, name)).isDirectory());
    expect(loose).toEqual([]);
    // The lint rule's layers name every folder there is (a new folder gets its place in them).
    expect(readdirSync(CORE).sort()).toEqual(Object.keys(LAYERS).sort());
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
    const insideRedis = sourceFiles(gatewayFolder).filter(
      (file) => !file.endsWith('gateway.ts') && !file.endsWith('scripts.ts'),
    );
    expect(
      insideRedis.filter((file) => call.test(readFileSync(file, 'utf8'))).map((file) => relative(LIB, file)),
    ).toEqual([]);
  });

  it('has no import circle in lib/ (type-only imports included): each file can be read after what it imports', () => {
    const graph = new Map(
      sourceFiles(LIB).map((file) => [
        file,
        [...readFileSync(file, 'utf8').matchAll(/from '(\.[^']+)'/g)].map((match) =>
          resolve(dirname(file), match[1]).replace(/\.js$/, '.ts'),
        ),
      ]),
    );
    const circles: string[] = [];
    const done = new Set<string>();
    const visit = (file: string, path: string[]): void => {
      const at = path.indexOf(file);
      if (at >= 0) {
        circles.push([...path.slice(at), file].map((each) => relative(LIB, each)).join(' -> '));
        return;
      }
      if (done.has(file) || !graph.has(file)) return;
      path.push(file);
      for (const target of graph.get(file) ?? []) visit(target, path);
      path.pop();
      done.add(file);
    };
    for (const file of graph.keys()) visit(file, []);
    expect(circles).toEqual([]);
  });

  it(`keeps every function and method within ${MAX_FUNCTION_LINES} lines (except where LONG_FUNCTIONS says why)`, () => {
    const long: string[] = [];
    const opening =
      /^(\s*)(?:export )?(?:static )?(?:private |protected |public )?(?:static )?(?:async )?(?:function )?(\w+)\s*(?:<[^>]*>)?\(.*\)(?::\s*[^{]+)?\s*\{\s*$/;
    for (const file of sourceFiles(LIB).filter((each) => !each.endsWith('dashboard.assets.ts'))) {
      const lines = readFileSync(file, 'utf8').split('\n');
      lines.forEach((line, index) => {
        const opened = opening.exec(line);
        if (!opened || /^\s*(if|for|while|switch|catch|return)\b/.test(line)) return;
        const end = lines.findIndex((each, at) => at > index && each === `${opened[1]}}`);
        const name = `${relative(LIB, file)}:${opened[2]}`;
        if (end - index - 1 > MAX_FUNCTION_LINES && !LONG_FUNCTIONS[name])
          long.push(`${name} (${end - index - 1} lines)`);
      });
    }
    expect(long).toEqual([]);
  });

  it(`keeps every class small enough to read in one sitting (${MAX_CLASS_LINES} lines at most)`, () => {
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
});
