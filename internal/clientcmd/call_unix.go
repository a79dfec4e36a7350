//go:build unix

package clientcmd

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup runs cmd in a process group of its own, so that Ctrl-C
// on the terminal reaches only us: we turn it into a cancellation.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
