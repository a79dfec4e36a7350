package robustness

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes the kernel kill cmd if the test process dies first
// (a timeout's panic, a killed run), so no component outlives its run.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
