//go:build unix

package worker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// CommandWaitDelay is how long Wait waits, after a Command's process was
// killed, for I/O pipes that something outside its process group still
// holds open; then it closes them and returns.
const CommandWaitDelay = 2 * time.Second

// Command is exec.CommandContext for handlers that run programs. The
// program runs in a process group of its own, and when ctx is done the
// whole group is killed with SIGKILL, so a shell's children and
// grandchildren stop with the call instead of running on. Wait returns at
// most CommandWaitDelay after the kill even if a process that left the
// group still holds the output pipes.
//
// A caller that sets cmd.SysProcAttr itself must keep Setpgid set. A
// program that moves its children to another process group or session
// takes them out of reach.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = CommandWaitDelay
	return cmd
}

// killGroup kills the process group that pid leads. A group already gone
// is os.ErrProcessDone, so Wait reports the program's own exit status.
func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
