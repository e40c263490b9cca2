// node scripts/check-readme-links.mjs: every relative link of the README, and of the documents it links to,
// resolves inside the package as npm packs it (so the README holds on the registry and in node_modules,
// not only in a clone of the repository); every `#anchor` names a heading of its document.
//
// The packed file list comes from `npm pack --dry-run --json --ignore-scripts` (what `files` ships; no
// build). Absolute links (https:, mailto:) are left alone. Exits 1 naming each broken link.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, normalize, resolve } from 'node:path';

const root = resolve(import.meta.dirname, '..');

/** The files `npm pack` would ship, as paths relative to the package root. */
function packedFiles() {
  const output = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const [report] = JSON.parse(output);
  return new Set(report.files.map((file) => file.path));
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes. */
function anchorsOf(markdown) {
  const anchors = new Set();
  const outsideCode = markdown.replace(/```[\s\S]*?```/g, '');
  for (const [, heading] of outsideCode.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const text = heading.replace(/`/g, '').replace(/\[([^\]]*)\]\([^)]*\)/g, '$1');
    anchors.add(
      text
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .trim()
        .replace(/\s/g, '-'),
    );
  }
  return anchors;
}

/** Markdown links and images outside code blocks and inline code: [text](target) and ![alt](target). */
function linksOf(markdown) {
  const outsideCode = markdown.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
  return [...outsideCode.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((match) => match[1]);
}

export function checkLinks() {
  const packed = packedFiles();
  const problems = [];
  const checked = new Set();
  const queue = ['README.md'];
  let links = 0;
  while (queue.length > 0) {
    const document = queue.shift();
    if (checked.has(document)) continue;
    checked.add(document);
    const markdown = readFileSync(join(root, document), 'utf8');
    for (const target of linksOf(markdown)) {
      if (/^[a-z][a-z+.-]*:/i.test(target)) continue; // https:, mailto:
      links++;
      const [path, anchor] = target.split('#');
      const file = path === '' ? document : normalize(join(dirname(document), decodeURIComponent(path)));
      if (path !== '' && !packed.has(file)) {
        problems.push(
          `${document}: "${target}" points at ${file}, which the package does not ship (add it to "files", or link it absolutely)`,
        );
        continue;
      }
      if (file.endsWith('.md')) {
        if (anchor && !anchorsOf(readFileSync(join(root, file), 'utf8')).has(anchor))
          problems.push(`${document}: "${target}" names no heading of ${file}`);
        queue.push(file);
      }
    }
  }
  return { problems, links, documents: [...checked] };
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const { problems, links, documents } = checkLinks();
  if (problems.length > 0) {
    console.error(`Relative links that break in the published package:\n  ${problems.join('\n  ')}`);
    process.exit(1);
  }
  console.log(`README links: all ${links} relative links of ${documents.join(', ')} resolve inside the packed package`);
}
