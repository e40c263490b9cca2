import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Starts `count` Node processes of a bench child script (next to this file, compiled), `atOnce` at a time,
 * each with `env` added to this process's; resolves once every one sent its first message (it is ready).
 */
export async function startChildren(
  script: string,
  count: number,
  env: Record<string, string>,
  atOnce = count,
): Promise<ChildProcess[]> {
  const path = fileURLToPath(new URL(script, import.meta.url));
  const children: ChildProcess[] = [];
  for (let i = 0; i < count; i += atOnce) {
    const batch = Array.from({ length: Math.min(atOnce, count - i) }, () =>
      fork(path, [], { env: { ...process.env, ...env } }),
    );
    await Promise.all(batch.map((child) => new Promise((resolve) => child.once('message', resolve))));
    children.push(...batch);
  }
  return children;
}

/** Asks each child to stop (the message 'stop') and resolves once all exited. */
export async function stopChildren(children: readonly ChildProcess[]): Promise<void> {
  await Promise.all(
    children.map(
      (child) =>
        new Promise((resolve) => {
          child.once('exit', resolve);
          child.send('stop');
        }),
    ),
  );
}

/** The CPU the children used so far, together (µs, user and system; each answers the message 'cpu'). */
export async function childrenCpu(children: readonly ChildProcess[]): Promise<number> {
  const each = await Promise.all(
    children.map(
      (child) =>
        new Promise<number>((resolve) => {
          const answer = (message: unknown): void => {
            const cpu = (message as { cpu?: unknown } | null)?.cpu;
            if (typeof cpu !== 'number') return;
            child.off('message', answer);
            resolve(cpu);
          };
          child.on('message', answer);
          child.send('cpu');
        }),
    ),
  );
  return each.reduce((sum, cpu) => sum + cpu, 0);
}
