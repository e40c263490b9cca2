import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { redisUrl } from '../support/redis.js';

const WORKER = fileURLToPath(new URL('../../.chaos-build/test/chaos/fixtures/worker.js', import.meta.url));
/** A process running only RedisTaskModule's reaper (sweeps, recurring schedules). */
export const REAPER = fileURLToPath(new URL('../../.chaos-build/test/chaos/fixtures/reaper.js', import.meta.url));

/** A worker child process and everything it printed. */
export interface WorkerProcess {
  readonly id: string;
  readonly child: ChildProcess;
  output: string;
  /** Resolves when the process has exited. */
  readonly exited: Promise<void>;
  kill(signal: NodeJS.Signals): Promise<void>;
  waitFor(text: string, timeoutMs?: number): Promise<void>;
}

export async function startWorkerProcess(
  id: string,
  env: Record<string, string | number>,
  script = WORKER,
): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [script], {
    env: {
      ...process.env,
      REDIS_URL: redisUrl(),
      WORKER_ID: id,
      NO_COLOR: '1',
      ...Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const worker: WorkerProcess = {
    id,
    child,
    output: '',
    exited,
    async kill(signal) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal);
      }
      await exited;
    },
    waitFor(text, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (worker.output.includes(text)) {
            cleanup();
            resolve();
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(
            new Error(
              `worker ${id} did not print "${text}" within ${timeoutMs} ms; output:\n${worker.output.slice(-2_000)}`,
            ),
          );
        }, timeoutMs);
        const onExit = () => {
          cleanup();
          reject(new Error(`worker ${id} exited before printing "${text}"; output:\n${worker.output.slice(-2_000)}`));
        };
        const cleanup = () => {
          clearTimeout(timer);
          child.stdout?.off('data', check);
          child.off('exit', onExit);
        };
        child.stdout?.on('data', check);
        child.once('exit', onExit);
        check();
      });
    },
  };
  child.stdout?.on('data', (chunk: Buffer) => {
    worker.output += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    worker.output += chunk.toString();
  });
  await worker.waitFor('READY');
  return worker;
}

/** A small deterministic generator (a chaos run is reproducible from its seed, printed on failure). */
export function seededRandom(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    return state / 2 ** 31;
  };
}
