// The attempt check of rule 2 (docs/protocol/41-tasks.md): a body starts
// only while its action is still running exactly the task's attempt in
// the run's current incarnation, the run is not finished, and — when the
// run was handed off — the runner that handed it off still lives. The Go
// worker folds the run with the aggregate (worker.LogCheck); this folds
// only what the rule needs, from the same log.
import { EVENT_STREAM, RUNNERS_BUCKET } from "./protocol.js";

/** The run cannot be read, or has not reached the task's fence yet: try again. */
export class NotVisibleError extends Error {}

// Events that name an action without ending its running attempt.
const KEEPS_RUNNING = new Set(["report_refused", "settlement_refused", "resolved"]);

function decodeMessage(sm) {
  const body = JSON.parse(new TextDecoder().decode(sm.data));
  if (body?.void) {
    const seq = Number(sm.header?.get("Weft-Void"));
    return { voids: Number.isInteger(seq) && seq > 0 && seq < sm.seq ? seq : 0, events: [] };
  }
  if (!Array.isArray(body?.events) || body.events.length === 0) {
    throw new NotVisibleError(`run message ${sm.seq} holds no events`);
  }
  return { voids: 0, events: body.events };
}

/**
 * The fold of rule 2 over a run's envelopes, for one task.
 * @returns {{visible: boolean, current: boolean, handedOffBy: string|null}}
 */
export function foldAttempt(envelopes, t) {
  let exists = false, incarnation = 0, finished = false, handedOffBy = null;
  let fence = null, running = false, attempts = 0;
  for (const env of envelopes) {
    const p = env.payload ?? {};
    switch (env.type) {
      case "run_started": exists = true; incarnation = 1; break;
      case "run_recovered": incarnation = p.incarnation; handedOffBy = null; break;
      case "run_handed_off": handedOffBy = p.runner; break;
      case "run_finished": finished = true; break;
      case "attempt_fenced":
        if (p.action === t.action) {
          fence = { attempt: p.attempt, incarnation: p.incarnation };
          attempts = Math.max(attempts, p.attempt);
          running = true;
        }
        break;
      case "actions_not_started":
        if ((p.actions ?? []).includes(t.action)) running = false;
        break;
      default:
        // Every other event naming the action ends its running attempt
        // (reported, lost, uncertain, settled, reconciled, queued again):
        // when in doubt the body does not start, and the run's own timer
        // or recovery decides the attempt.
        if (p.action === t.action && !KEEPS_RUNNING.has(env.type)) running = false;
    }
  }
  const visible = exists && incarnation >= t.incarnation && attempts >= t.attempt;
  const current = visible && !finished && running && fence.attempt === t.attempt &&
    fence.incarnation === t.incarnation && incarnation === t.incarnation;
  return { visible, current, handedOffBy };
}

/** Whether the last message of a run holds t's fence at t.fence_version (the shortcut of rule 2). */
function fencedLast(events, t) {
  const first = events[0].version, last = events.at(-1).version;
  if (t.fence_version < first || t.fence_version > last) return false;
  const env = events[t.fence_version - first];
  const p = env.payload ?? {};
  return env.type === "attempt_fenced" && p.action === t.action && p.attempt === t.attempt && p.incarnation === t.incarnation;
}

/**
 * Returns the default attempt check: reads the run from WEFT_EVENTS with
 * direct gets. It resolves true (current) or false (stale), and throws when
 * the run cannot be read or has not reached the fence yet.
 * @param {import("@nats-io/jetstream").JetStreamManager} jsm
 * @param {() => Promise<import("@nats-io/kv").KV>} runners
 */
export function logCheck(jsm, runners) {
  return async (t) => {
    const subj = `weft.ev.${t.run}.>`;
    if (t.fence_version > 0) {
      const sm = await jsm.direct.getMessage(EVENT_STREAM, { last_by_subj: subj });
      if (!sm) throw new NotVisibleError(`run ${t.run} has no events yet`);
      const { events } = decodeMessage(sm);
      if (events.length > 0) {
        if (events.at(-1).version < t.fence_version) {
          throw new NotVisibleError(`run ${t.run}: the fence of ${t.action} attempt ${t.attempt} (version ${t.fence_version}) is not visible yet`);
        }
        if (fencedLast(events, t)) return true;
      }
    }
    const msgs = [];
    for (let seq = 1; ;) {
      const it = await jsm.direct.getBatch(EVENT_STREAM, { seq, next_by_subj: subj, batch: 1024 });
      let n = 0;
      for await (const sm of it) {
        msgs.push(sm);
        seq = sm.seq + 1;
        n++;
      }
      if (n < 1024) break;
    }
    const voided = new Set();
    const decoded = msgs.map((sm) => ({ sm, ...decodeMessage(sm) }));
    for (const d of decoded) if (d.voids) voided.add(d.voids);
    const envelopes = [];
    for (const d of decoded) if (!voided.has(d.sm.seq)) envelopes.push(...d.events);
    const f = foldAttempt(envelopes, t);
    if (!f.visible) {
      throw new NotVisibleError(`run ${t.run}: the fence of ${t.action} attempt ${t.attempt} (incarnation ${t.incarnation}) is not visible yet`);
    }
    if (!f.current || f.handedOffBy === null) return f.current;
    const kv = await runners();
    const e = await kv.get(f.handedOffBy);
    return !!e && e.operation === "PUT";
  };
}
