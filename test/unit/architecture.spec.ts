import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import ts from 'typescript';
import { scriptDefinitions } from '../../lib/core/redis/scripts.js';
import { LAYERS } from '../../scripts/eslint/house-rules.mjs';

const LIB = resolve('lib');
/** Lines of a class, from its first line (decorators included) to its closing brace, by the syntax tree. */
const MAX_CLASS_LINES = 250;
/** Lines of a function, method or arrow function, from its signature to its closing brace, by the syntax tree. */
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

/** Every file under `dir`, recursively. */
function allFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? allFiles(path) : [path];
  });
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.generated.ts') ? [path] : [];
  });
}

/** Each function (declarations, methods, accessors, constructors, function expressions, arrow functions) and class of a file, with the lines it spans from its signature (decorators included) to its closing brace. */
function measured(file: string): { kind: 'function' | 'class'; name: string; lines: number }[] {
  return measuredText(file, readFileSync(file, 'utf8'));
}

function measuredText(file: string, text: string): { kind: 'function' | 'class'; name: string; lines: number }[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: { kind: 'function' | 'class'; name: string; lines: number }[] = [];
  const visit = (node: ts.Node): void => {
    const kind = ts.isClassLike(node)
      ? 'class'
      : ts.isFunctionLike(node) && 'body' in node && node.body
        ? 'function'
        : undefined;
    if (kind) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      found.push({ kind, name: nameOf(node, source), lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** A function's or class's own name, else the name it is given (a variable, a property), else `(anonymous)`. */
function nameOf(node: ts.Node, source: ts.SourceFile): string {
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  const own = (node as { name?: ts.Node }).name;
  if (own) return own.getText(source);
  const parent = node.parent as { name?: ts.Node } | undefined;
  if (
    parent?.name &&
    (ts.isVariableDeclaration(node.parent) ||
      ts.isPropertyAssignment(node.parent) ||
      ts.isPropertyDeclaration(node.parent))
  )
    return parent.name.getText(source);
  return '(anonymous)';
}

describe('architecture', () => {
  it('keeps every core file in a role folder', () => {
    const loose = readdirSync(CORE).filter((name) => !statSync(join(CORE, name)).isDirectory());
    expect(loose).toEqual([]);
    // The lint rule's layers name every folder there is (a new folder gets its place in them).
    expect(readdirSync(CORE).sort()).toEqual(Object.keys(LAYERS).sort());
  });

  it('names every file of lib/core in ARCHITECTURE.md (its "Every file" section), and no file that is gone', () => {
    const text = readFileSync('ARCHITECTURE.md', 'utf8');
    const section = text.slice(
      text.indexOf('## Every file of `lib/core`'),
      text.indexOf('## Adding a per-task feature'),
    );
    expect(section.length).toBeGreaterThan(1_000);
    const named = new Set([...section.matchAll(/`([\w.+/-]+)`/g)].map((match) => match[1]));
    const files = allFiles(CORE).map((file) => relative(CORE, file));
    const unnamed = files.filter((file) => {
      const base = file.split('/').pop() ?? file;
      return !named.has(base) && !named.has(base.replace(/\.lua$/, '')) && !named.has(file.replace(/^redis\//, ''));
    });
    expect(unnamed).toEqual([]);
    // Every file name it gives exists (a renamed or removed file is taken out of the map).
    const known = new Set(
      files.flatMap((file) => {
        const base = file.split('/').pop() ?? file;
        return [base, base.replace(/\.lua$/, ''), file, file.replace(/^redis\//, '')];
      }),
    );
    const gone = [...named].filter(
      (name) => !name.startsWith('test/') && /\.(ts|lua)$|^[a-z][A-Za-z]+-\d+(\+n)?$/.test(name) && !known.has(name),
    );
    expect(gone).toEqual([]);
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

  it(`keeps every function within ${MAX_FUNCTION_LINES} lines and every class within ${MAX_CLASS_LINES}, by the syntax tree`, () => {
    const large: string[] = [];
    for (const file of sourceFiles(LIB)) {
      for (const { kind, name, lines } of measured(file)) {
        const cap = kind === 'class' ? MAX_CLASS_LINES : MAX_FUNCTION_LINES;
        if (lines > cap && !LONG_FUNCTIONS[`${relative(LIB, file)}:${name}`])
          large.push(`${relative(LIB, file)}: ${kind} ${name} (${lines} lines)`);
      }
    }
    expect(large).toEqual([]);
  });

  it('measures what it means to: a signature over several lines counts, and so does a nested arrow function', () => {
    const sample = [
      'export function spread(',
      '  a: number,',
      '  b: number,',
      '): number {',
      '  const inner = (x: number) => {',
      '    return x;',
      '  };',
      '  return inner(a + b);',
      '}',
      'class Small {',
      '  method(): void {}',
      '}',
    ].join('\n');
    expect(measuredText('sample.ts', sample)).toEqual([
      { kind: 'function', name: 'spread', lines: 9 },
      { kind: 'function', name: 'inner', lines: 3 },
      { kind: 'class', name: 'Small', lines: 3 },
      { kind: 'function', name: 'method', lines: 1 },
    ]);
  });
});
