package integration

import (
	"os/exec"
	"syscall"
)

// tieToTest makes the kernel kill cmd when the test process dies (a go
// test timeout, a kill), so no mzproxy outlives its test holding ports.
func tieToTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
