/**
 * Resolves as `work` settles, or with undefined once `signal` aborts, whichever comes first.
 *
 * Unlike `Promise.race([work, stopped])` against one promise that lives as long as the signal, nothing
 * is left behind per call: a race adds a reaction to the long-lived promise that stays until it settles,
 * so a loop racing it on every wait grows without bound. Here the abort listener goes as soon as `work`
 * settles.
 */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const onAbort = (): void => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
