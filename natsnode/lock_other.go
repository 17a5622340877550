//go:build !unix

package natsnode

// lockDir does not lock on this platform.
func lockDir(string) (func(), error) { return func() {}, nil }
