// Tool definitions and bindings (docs/semantics.md §3): a handler and a
// classify that has no default, as the Go tools.Bind.

/** A definite failure: the model sees {"error": message}; the run goes on. */
export class Explain {
  /** @param {string} message shown to the model; no secrets */
  constructor(message) { this.message = String(message); }
}

/** The effect may have happened: the action blocks the run until reconciled and is never retried. */
export class Uncertain {
  /** @param {string} evidence */
  constructor(evidence) { this.evidence = String(evidence); }
}

export const explain = (message) => new Explain(message);
export const uncertain = (evidence) => new Uncertain(evidence);

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Binds a handler to a tool name. handler(input, call) returns (or
 * resolves to) the output, which is encoded with JSON.stringify. classify
 * turns every error the handler throws into explain(...) or
 * uncertain(...): it is required, because an error after a request was
 * sent must not look like a clean failure the model could retry. A
 * classify that throws or returns neither makes the attempt uncertain.
 *
 * @param {{name: string, description?: string, inputSchema?: object}} def
 * @param {(input: any, call: object) => any} handler
 * @param {(err: unknown, call: object) => Explain|Uncertain} classify
 */
export function bind(def, handler, classify) {
  return bound(def, handler, classify, false);
}

/**
 * Binds a settling tool's handler: the call it gets carries a settlement
 * handle (call.settlement) that settles the action later, and its own
 * return value still wins whenever it returns (docs/semantics.md §3, §9). The
 * tool's settle window is the agent's (the Go definition): the task says
 * it (settle_within_ms).
 */
export function bindSettling(def, handler, classify) {
  return bound(def, handler, classify, true);
}

function bound(def, handler, classify, settling) {
  const name = typeof def === "string" ? def : def?.name;
  if (!NAME.test(name ?? "")) throw new TypeError(`tool name ${JSON.stringify(name)}: 1-64 ASCII letters, digits, _ or -`);
  if (typeof handler !== "function") throw new TypeError(`tool ${name}: the handler is not a function`);
  if (typeof classify !== "function") {
    throw new TypeError(`tool ${name}: classify is required: there is no default (an error after a request was sent must be classified as explain or uncertain by the tool's author)`);
  }
  return Object.freeze({ name, description: def?.description, inputSchema: def?.inputSchema, handler, classify, settling });
}
