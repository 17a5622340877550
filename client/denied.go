package client

import "github.com/weftrun/weft/roles"

// explained is v and err with a permission_denied error's message naming
// the roles whose credentials may publish to the subject the NATS server
// refused (roles.Explain): "…; the credentials of role operator may (weft
// roles show ROLE)". Every command and query of a Client answers through
// it, so that an application, the console and the MCP servers tell the
// person which credentials to ask for, as the CLI does. The code and the
// reason are kept. The cost: package roles (its subject table,
// roles.Permissions) links the agent-definition packages it names into
// an application that imports only client — no NATS server code, about
// 109 KB more in a binary of 6.1 MB (go list -deps ./client, measured
// when this was added); a lighter home for the table would drop that.
func explained[T any](v T, err error) (T, error) { return v, roles.Explain(err) }
