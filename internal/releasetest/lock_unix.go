//go:build unix

package releasetest

import (
	"os"
	"syscall"
)

// lock takes an exclusive lock on path, created if need be, and returns
// its release. Two processes building the same release take turns; the
// second finds the first's binary.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
