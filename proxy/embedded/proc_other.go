//go:build unix && !linux

package embedded

import (
	"errors"
	"os/exec"
	"syscall"
)

// startTied starts cmd. Outside Linux there is no Pdeathsig, so a postmaster
// can outlive a killed mzproxy; the next Start on the same DataDir then fails
// with PostgreSQL's "lock file already exists" in the log tail.
func startTied(cmd *exec.Cmd, _ syscall.Signal) (<-chan error, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited, nil
}

// Without /proc a live pid cannot be told apart from a recycled one, so
// Start leaves postmaster.pid to postgres's own check.
const canJudgePids = false

func isPostgresFor(int, string) bool { return false }

func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

func postgresIn(string) []int { return nil }
