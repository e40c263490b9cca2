import { scriptDefinitions } from './scripts.js';

/**
 * Redis's refusals that no retry heals by itself, read from its replies in one place: an ACL refusal
 * (NOPERM, or its form inside a script, which names the script and line but not the command), and a full
 * Redis (OOM at `maxmemory` with `noeviction`).
 */

/** An ACL refusal: Redis's words, and the command refused when they (or the script's line) tell it. */
export interface PermissionRefusal {
  readonly reply: string;
  readonly command?: string;
}

const NOPERM_COMMAND = /^NOPERM .*'([a-z|]+)' command/;
const IN_SCRIPT =
  /The user executing the script can't (run this command|access)[^]*?script: ([0-9a-f]{40}), on @user_script:(\d+)/;

/** The ACL refusal `error` is, or undefined. */
export function permissionRefusal(error: unknown): PermissionRefusal | undefined {
  if (!(error instanceof Error)) return undefined;
  const reply = error.message;
  if (reply.startsWith('NOPERM')) return { reply, command: NOPERM_COMMAND.exec(reply)?.[1] };
  const inScript = IN_SCRIPT.exec(reply);
  if (!inScript) return undefined;
  const script = scriptDefinitions().find((each) => each.sha === inScript[2] || each.flagged.sha === inScript[2]);
  const source = script && (script.sha === inScript[2] ? script.source : script.flagged.source);
  const line = source?.split('\n')[Number(inScript[3]) - 1] ?? '';
  const command = /'([A-Z][A-Z]+)'/.exec(line)?.[1]?.toLowerCase();
  const what =
    inScript[1] === 'access' ? "a key outside the user's key patterns" : `the command ${command ?? '(unknown)'}`;
  return {
    reply: `NOPERM in script ${script?.name ?? inScript[2]} (line ${inScript[3]}): ${what} was refused`,
    command: inScript[1] === 'access' ? undefined : command,
  };
}

/** True when Redis refused a write because it is full (`maxmemory` reached, eviction policy `noeviction`). */
export function isRedisFull(error: unknown): boolean {
  return error instanceof Error && /\bOOM command not allowed\b/.test(error.message);
}
