import { fork, type ChildProcess } from 'node:child_process';

/**
 * Each queue library runs in a Node process of its own, started once for the whole bench: the parent
 * asks it for one measurement at a time (emit rows, a drain, a latency run...) and the libraries still
 * take turns round by round. In one shared process, BullMQ's runs slowed every later run of the two
 * other libraries built on the same ioredis module (ours and Nest's transport), by way of the code they
 * share: measured on this machine, our drain at concurrency 64 took 9.4-12 µs of Node CPU per task with
 * BullMQ's runs interleaved, 5.7-6.3 with Bee-Queue's (node-redis) or none, and its rate 91-117k/s
 * against 135-142k/s. A library's figures are its own, as in a service that runs one of them.
 */
export type LibraryKind = 'ours' | 'bull' | 'bee' | 'nest';

/** The measurements a library's process runs on request (arguments and results cross the IPC channel). */
export type LibraryOps = Record<string, (...args: never[]) => Promise<unknown>>;

interface Request {
  readonly id: number;
  readonly op: string;
  readonly args: readonly unknown[];
}

type Reply = { readonly id: number; readonly result: unknown } | { readonly id: number; readonly error: string };

/** The parent's handle on one library's process. */
export class LibraryProcess {
  private readonly child: ChildProcess;
  private next = 0;
  // One entry per measurement under way (at most one): not a per-task path.
  private readonly waiting = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  private exited: Promise<void>;

  /** `script` is the bench's main module: started with BENCH_LIBRARY set, it serves `kind` (see serveLibrary). */
  constructor(
    readonly kind: LibraryKind,
    readonly name: string,
    script: string,
  ) {
    this.child = fork(script, [], {
      env: { ...process.env, BENCH_LIBRARY: kind },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      // NaN and undefined (a figure a library cannot produce) cross as they are.
      serialization: 'advanced',
    });
    this.child.on('message', (reply: Reply) => {
      const waiter = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (!waiter) return;
      if ('error' in reply) waiter.reject(new Error(`${name}: ${reply.error}`));
      else waiter.resolve(reply.result);
    });
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code) => {
        for (const { reject } of this.waiting.values())
          reject(new Error(`${name}'s bench process exited (code ${code})`));
        this.waiting.clear();
        resolve();
      });
    });
  }

  /** Runs one measurement in the library's process; resolves with its result. */
  call<T>(op: string, ...args: unknown[]): Promise<T> {
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.child.send({ id, op, args } satisfies Request);
    });
  }

  /** Closes the library's connections; resolves once its process has exited. */
  async close(): Promise<void> {
    await this.call('close').catch(() => undefined);
    await this.exited;
  }
}

/** In a library's process: runs each request's measurement, one at a time, and sends back its result. */
export function serveLibrary(ops: LibraryOps): void {
  const send = (reply: Reply) => process.send?.(reply);
  process.on('message', (request: Request) => {
    const op = ops[request.op] as ((...args: unknown[]) => Promise<unknown>) | undefined;
    if (!op) {
      send({ id: request.id, error: `no measurement "${request.op}"` });
      return;
    }
    op(...request.args).then(
      (result) => send({ id: request.id, result }),
      (error: unknown) =>
        send({ id: request.id, error: error instanceof Error ? (error.stack ?? error.message) : String(error) }),
    );
  });
}
