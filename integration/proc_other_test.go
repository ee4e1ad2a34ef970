//go:build !linux

package integration

import "os/exec"

// tieToTest: only Linux can tie a child's life to its parent's.
func tieToTest(cmd *exec.Cmd) {}
