package cmdline

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// ListenFlag listens on addr, given by --flag; an address in use says
// which flag changes it.
func ListenFlag(flag, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, portInUse{flag, addr, err}
	}
	return lis, err
}

// FlagForPort names the flag that changes addr when err says it is in use.
func FlagForPort(err error, flag, addr string) error {
	if errors.Is(err, syscall.EADDRINUSE) && !errors.As(err, new(portInUse)) {
		return portInUse{flag, addr, err}
	}
	return err
}

// portInUse is a listen address another process holds.
type portInUse struct {
	flag, addr string
	err        error
}

func (e portInUse) Error() string {
	return fmt.Sprintf("%s is in use (another mcpcancel dev?): pass --%s HOST:PORT, or port 0 for a free one", e.addr, e.flag)
}

func (e portInUse) Unwrap() error { return e.err }
