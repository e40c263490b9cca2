import type { Cluster, Redis } from 'ioredis';

/** A connection: an ioredis `Redis` or `Cluster`. */
export type RedisConnection = Redis | Cluster;

/** A Lua script file and what its name and header promise about it. */
export interface ScriptDefinition {
  /** The command name it is defined under, e.g. `claimTasks`. */
  readonly name: string;
  readonly fileName: string;
  /** Fixed number of KEYS; for a `-F+n` script, the fixed part (the caller passes numkeys). */
  readonly fixedKeys: number;
  /** Whether the script takes a variable number of KEYS after the fixed ones (`-F+n`). */
  readonly variableKeys: boolean;
  /** The file as written (header included). */
  readonly lua: string;
  /**
   * What Redis runs: the helpers named on the header's `Includes:` line, then the file; or, where the
   * file has a `-- @helpers` line (a fast path before it pays for no helper), the helpers there.
   */
  readonly source: string;
  /** SHA1 of `source` (what EVALSHA names), computed once per process, not per connection. */
  readonly sha: string;
  /** `source` under its Redis 7 flags line (what it may do when Redis is full, see script-flags.ts), and its SHA1. */
  readonly flagged: { readonly source: string; readonly sha: string };
}
