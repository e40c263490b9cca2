// node scripts/check-exported-types.mjs: every type a public signature reaches is exported by an entry point.
//
// A user's code that returns what our API returns without writing the type (`async enqueue() { return
// firstValueFrom(tasks.emit(...)) }`) makes the compiler name that type in the user's own declarations
// (`declaration: true`, as Nest's starters set). It can only name a type an entry point of package.json's
// `exports` exports; any other fails the user's build (TS2883, "cannot be named without a reference to ...").
// This walks the built declarations (dist/) from every entry point: each exported symbol's declarations, every
// type they mention (inferred types included: tsc wrote them out), and so on through what those mention. A
// type (interface, class, alias, enum) or a `typeof` value declared in this package and reached that way
// must be exported by some entry point. Runs after `npm run build`; exits 1 naming each one that is not.
import { existsSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(import.meta.dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

/** Every entry point's declaration files, per condition (import and require each have their own). */
function entryFiles() {
  const files = [];
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (typeof target !== 'object') continue;
    for (const condition of ['import', 'require']) {
      const types = target[condition]?.types;
      if (types) files.push({ subpath, condition, file: join(root, types) });
    }
  }
  return files;
}

export function checkExportedTypes() {
  const entries = entryFiles();
  for (const { file } of entries) {
    if (!existsSync(file)) throw new Error(`${relative(root, file)} is missing: run npm run build first`);
  }
  const program = ts.createProgram(
    entries.map((entry) => entry.file),
    {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
    },
  );
  const checker = program.getTypeChecker();
  const dist = join(root, 'dist') + '/';
  const ours = (declaration) => declaration.getSourceFile().fileName.startsWith(dist);
  const resolveAlias = (symbol) =>
    symbol && symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;

  const problems = [];
  const reached = {};
  for (const condition of ['import', 'require']) {
    const exported = new Map(); // symbol -> entry subpath
    const roots = [];
    for (const entry of entries.filter((each) => each.condition === condition)) {
      const source = program.getSourceFile(entry.file);
      const moduleSymbol = source && checker.getSymbolAtLocation(source);
      if (!moduleSymbol) throw new Error(`${relative(root, entry.file)} has no exports`);
      for (const symbol of checker.getExportsOfModule(moduleSymbol)) {
        const target = resolveAlias(symbol);
        if (!exported.has(target)) exported.set(target, entry.subpath);
        roots.push(target);
      }
    }
    // Walk: each symbol's declarations, and every symbol a type node in them names.
    const seen = new Set();
    const queue = [...roots];
    const via = new Map(); // symbol -> the symbol whose declaration mentioned it (for the message)
    const visitSymbol = (symbol, from) => {
      const target = resolveAlias(symbol);
      if (!target || seen.has(target)) return;
      const declarations = target.declarations ?? [];
      if (declarations.length === 0 || !declarations.some(ours)) return;
      if (
        declarations.every((declaration) => ts.isTypeParameterDeclaration(declaration) || ts.isParameter(declaration))
      )
        return;
      seen.add(target);
      via.set(target, from);
      queue.push(target);
    };
    const visitNode = (node, owner) => {
      if (ts.isTypeReferenceNode(node)) {
        const name = ts.isQualifiedName(node.typeName) ? node.typeName.right : node.typeName;
        visitSymbol(checker.getSymbolAtLocation(name), owner);
      } else if (ts.isImportTypeNode(node) && node.qualifier) {
        const name = ts.isQualifiedName(node.qualifier) ? node.qualifier.right : node.qualifier;
        visitSymbol(checker.getSymbolAtLocation(name), owner);
      } else if (ts.isExpressionWithTypeArguments(node)) {
        visitSymbol(checker.getSymbolAtLocation(node.expression), owner);
      } else if (ts.isTypeQueryNode(node)) {
        const name = ts.isQualifiedName(node.exprName) ? node.exprName.right : node.exprName;
        visitSymbol(checker.getSymbolAtLocation(name), owner);
      }
      ts.forEachChild(node, (child) => visitNode(child, owner));
    };
    for (const symbol of roots) seen.add(symbol);
    while (queue.length > 0) {
      const symbol = queue.shift();
      for (const declaration of symbol.declarations ?? []) {
        if (!ours(declaration)) continue;
        // Private members are emitted without types; their names are not part of the public surface.
        ts.forEachChild(declaration, (child) => {
          const modifiers = ts.canHaveModifiers(child) ? (ts.getModifiers(child) ?? []) : [];
          if (modifiers.some((modifier) => modifier.kind === ts.SyntaxKind.PrivateKeyword)) return;
          visitNode(child, symbol);
        });
      }
    }
    reached[condition] = seen.size;
    for (const symbol of seen) {
      if (exported.has(symbol)) continue;
      const declaration = symbol.declarations.find(ours);
      const chain = [];
      for (let at = via.get(symbol); at && chain.length < 4; at = via.get(at)) chain.push(at.getName());
      problems.push(
        `${condition}: ${symbol.getName()} (${relative(root, declaration.getSourceFile().fileName)}) is reached through ${chain.join(' <- ')} but no entry point exports it`,
      );
    }
  }
  return { problems, reached };
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const { problems, reached } = checkExportedTypes();
  if (problems.length > 0) {
    console.error(
      `Types a public signature reaches but no entry point exports (a user's declaration build fails on them, TS2883):\n  ${problems.join('\n  ')}`,
    );
    process.exit(1);
  }
  console.log(
    `exported types: every type reachable from the entry points' declarations is exported (${reached.import} in the ESM build, ${reached.require} in the CommonJS one)`,
  );
}
