package cmdline

import (
	"errors"
	"fmt"
	"net"
	"strings"
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

// portInUse is a listen address another process holds.
type portInUse struct {
	flag, addr string
	err        error
}

func (e portInUse) Error() string {
	return fmt.Sprintf("%s is in use (another mcpcancel dev?): pass --%s HOST:PORT, or port 0 for a free one", e.addr, e.flag)
}

func (e portInUse) Unwrap() error { return e.err }

// Addr is one address a command listens on, by the flag that sets it.
// ListenAll fills Lis, and FellBack when it took a free port instead.
type Addr struct {
	Flag, Addr string
	// Fallback says a free port of the same host will do when Addr is in
	// use: the user left the flag to its default.
	Fallback bool

	Lis      net.Listener
	FellBack bool
}

// ListenAll listens on every address a command needs before anything
// starts, so that one run reports every address it cannot have, not only
// the first. An Addr with an empty address is skipped. On error it closes
// what it opened and names each address that failed.
func ListenAll(addrs ...*Addr) error {
	var inUse []portInUse
	var errs []error
	for _, a := range addrs {
		if a.Addr == "" {
			continue
		}
		err := a.listen()
		var p portInUse
		switch {
		case errors.As(err, &p):
			inUse = append(inUse, p)
		case err != nil:
			errs = append(errs, fmt.Errorf("--%s %s: %w", a.Flag, a.Addr, err))
		}
	}
	if len(inUse) == 0 && len(errs) == 0 {
		return nil
	}
	for _, a := range addrs {
		if a.Lis != nil {
			a.Lis.Close()
			a.Lis = nil
		}
	}
	return errors.Join(append([]error{portsInUse(inUse)}, errs...)...)
}

func (a *Addr) listen() error {
	lis, err := ListenFlag(a.Flag, a.Addr)
	if err != nil && a.Fallback && errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(a.Addr)
		lis, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
		a.FellBack = err == nil
	}
	a.Lis = lis
	return err
}

// portsInUse reports every address in use at once; nil for none.
func portsInUse(ps []portInUse) error {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d addresses are in use (another mcpcancel dev?):", len(ps))
	for _, p := range ps {
		fmt.Fprintf(&b, "\n  %s (--%s)", p.addr, p.flag)
	}
	b.WriteString("\npass each flag another HOST:PORT, or port 0 for a free one")
	return multiInUse{msg: b.String(), ps: ps}
}

// multiInUse is several listen addresses other processes hold.
type multiInUse struct {
	msg string
	ps  []portInUse
}

func (e multiInUse) Error() string { return e.msg }

func (e multiInUse) Unwrap() []error {
	errs := make([]error, len(e.ps))
	for i, p := range e.ps {
		errs[i] = p
	}
	return errs
}
