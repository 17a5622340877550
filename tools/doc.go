// Package tools defines the typed tools an agent may call: what the model
// is told about a tool, how its arguments are checked and decoded, what its
// body does, and what each way a body can end means for the run.
//
// # Definitions and codecs
//
// Define[In, Out](name, description) returns a Definition: the tool's name
// (1-64 ASCII letters, digits, '_' or '-'; see ValidName), the description
// the model reads, and the codecs of its input and output types. The input
// codec's JSON Schema, generated from In, is what the model is shown; the
// same codec checks the arguments the model sends against that schema
// (with github.com/google/jsonschema-go, the one validator, its schema
// resolved once per codec) and decodes them, and a value that does not fit
// gives a *ValidationError naming the JSON Pointer path and the reason, the
// detail of an invalid_arguments outcome: the same value always gets the
// same detail (docs/adr/0022). Struct fields are required unless they are
// pointers or tagged omitempty/omitzero; the `jsonschema:"…"` tag is a
// field's description; the `enum:"a,b"` tag and Enumerated types restrict a
// field to a closed set.
//
// # Binding
//
// Bind(definition, handler, classify) attaches a typed Handler. The handler
// runs with the run's context, bounded by the tool's timeout, and gets the
// Call it answers (run id, action id, attempt, correlation; IdempotencyKey
// derives a key for external APIs) and the decoded input. classify is
// mandatory: it turns every error the handler returns into Explain(message),
// a definite failure the model sees as {"error": message}, or
// Uncertain(evidence), an effect that may have happened, which blocks the
// run until a person reconciles it. A panic counts as Uncertain.
//
// BindSettling attaches a SettlingHandler that also gets a Settler: if its
// task is stopped (timeout, cancellation) the run waits up to the settle
// window for a settlement through it before recording an uncertain effect.
//
// WithReplay lets the runtime start a body again after a crash, a timeout
// or a lost worker or runner; WithTimeout bounds a body by After(d) or
// Infinity() instead of the agent's tool timeout. Both only record a setting:
// agent.Build checks every setting of every tool at once.
//
// # Policy match and reconciliation
//
// Input(definition, action) is a policy's typed view of an action: not
// matched when the action calls another tool, the decoded input when it
// calls this one, and an error when the arguments do not decode with this
// definition (two definitions of one name drifted apart), which the policy
// passes on to stop the run. Reconciliation, FailedReconciliation and
// Unconfirmed build the content a person records for an uncertain action.
//
// # The runtime's view
//
// The runtime sees bound tools as the type-erased Tool interface: Validate
// checks and normalizes arguments before any policy runs, and Invoke runs the
// body once and always returns a Result (output, explain or uncertain). The
// runtime builds each settling invocation's Settlement with NewSettlement.
package tools
