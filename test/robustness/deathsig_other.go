//go:build !linux

package robustness

import "os/exec"

// dieWithTest is dieWithTest of deathsig_linux.go, which has no
// equivalent here: a killed run may leave its components running.
func dieWithTest(*exec.Cmd) {}
