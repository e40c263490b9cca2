import { Command } from 'ioredis';
import { isCallRecord, writtenRecord } from './call-record.js';
import { scriptFlagsOn } from './script-flags.js';
import type { RedisConnection, ScriptDefinition } from './script-types.js';

type Arg = string | number;

/** A script's function on a connection (or, copied, on a pipeline of it). */
export type ScriptFunction = (this: unknown, ...args: Arg[]) => unknown;

/** Every script reply is read as UTF-8 strings (and integers), as ioredis's defined commands read them. */
const OPTIONS = { replyEncoding: 'utf8' } as const;

/**
 * A script's command on a connection, sent as one EVALSHA (EVAL when Redis answers NOSCRIPT: after a
 * restart, a failover or a SCRIPT FLUSH; a script that is missing did not run, so the retry is safe).
 *
 * What ioredis's `defineCommand` function does too, without its generic steps that cost a per-task
 * path more than the rest of its work: three copies of the arguments and a flattening pass
 * (`Array#flat`, about a microsecond with a task's arguments), a closure per write and a second
 * promise per call for the NOSCRIPT fallback. The command still goes through the connection's
 * `sendCommand`, so Cluster routing and redirections, the offline queue, timeouts and command
 * instrumentation see it as they see any other. A pipeline copies the connection's functions and calls
 * them on itself: those calls take ioredis's own function (`generic`), which queues them.
 */
export function scriptCommand(
  connection: RedisConnection,
  script: ScriptDefinition,
  generic: ScriptFunction,
): ScriptFunction {
  const { sha, source, flagged } = script;
  // A `-F+n` script's caller passes numkeys first; the others have a fixed count.
  const numKeys = script.variableKeys ? undefined : String(script.fixedKeys);
  // Sized at once, not a literal grown by push: an array literal is an allocation site, and V8 can
  // decide to make a site's arrays in the old generation, where each one held its task's strings
  // through scavenges (measured: 144 bytes promoted per call at 10 calls per ms, 15 like this).
  const skip = numKeys === undefined ? 1 : 2;
  // Only the enqueue script takes a call record (its first ARGV, after its one key).
  const recordAt = script.name === 'enqueueTasks' ? skip + 1 : -1;
  const wire = (head: string, args: readonly Arg[]): string[] => {
    const out = new Array<string>(args.length + skip);
    out[0] = head;
    if (numKeys !== undefined) out[1] = numKeys;
    for (let i = 0; i < args.length; i++) {
      const arg = args[i];
      out[i + skip] = typeof arg === 'string' ? arg : String(arg);
    }
    return out;
  };
  const commandOf = (name: 'evalsha' | 'eval', args: string[]): Command => {
    // Arguments set after construction: they are strings already, so the constructor's pass over
    // them (flattening, stringifying) has nothing to do.
    const command = new Command(name, undefined, OPTIONS);
    command.args = args;
    return command;
  };
  return function (this: unknown, ...args: Arg[]): unknown {
    if (this !== connection) return generic.apply(this, args);
    // Redis 7 reads what a script may do when Redis is full from its first line (script-flags.ts).
    const flags = scriptFlagsOn();
    const sent = wire(flags ? flagged.sha : sha, args);
    const command = commandOf('evalsha', sent);
    if (recordAt > 0 && isCallRecord(sent[recordAt])) resentAs(command, sent, recordAt);
    const reject = command.reject;
    command.reject = (error: Error) => {
      if (!String(error?.message).includes('NOSCRIPT')) return reject(error);
      const retried = sent.slice(); // the EVALSHA itself stays as written (Cluster may resend it)
      retried[0] = flags ? flagged.source : source;
      const again = commandOf('eval', retried);
      again.promise.then(command.resolve, reject);
      void connection.sendCommand(again);
    };
    void connection.sendCommand(command);
    return command.promise as Promise<unknown>;
  };
}

/**
 * ioredis writes a command again after a reconnection when its reply was lost
 * (`autoResendUnfulfilledCommands`): by then Redis may have run it. A call that carries a call record
 * says so on every write after the first: mode '2' (answer from the record if the first write ran); and on
 * any write, the first from the offline queue included, '3' once the caller's deadline passed (the caller
 * was told it failed: write nothing new). See `writtenRecord`.
 */
function resentAs(command: Command, sent: string[], at: number): void {
  const toWritable = command.toWritable;
  const first = sent[at];
  let writes = 0;
  command.toWritable = function (this: Command, socket: unknown) {
    sent[at] = writtenRecord(first, ++writes);
    return toWritable.call(this, socket as never);
  };
}
