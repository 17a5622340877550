//go:build unix

package natsnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on dir/weft.lock, so two embedded servers
// never share a store (nats-server itself does not guard against it).
func lockDir(dir string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "weft.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("natsnode: lock store dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (run one embedded server and point the other processes at it with NATS_URL)", ErrDataDirInUse, dir)
		}
		return nil, fmt.Errorf("natsnode: lock store dir: %w", err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
