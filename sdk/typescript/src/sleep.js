// Waiting that a signal cuts short, for the worker's and the client's
// backoffs.

/** Resolves true after ms, or false at once when signal aborts first. */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const t = setTimeout(() => { signal?.removeEventListener("abort", onAbort); resolve(true); }, ms);
    const onAbort = () => { clearTimeout(t); resolve(false); };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
